"""The front door's checks before a token is looked at (services/access/front.py), and the hello
proof (domain/hello.py), with known answers."""

from __future__ import annotations

import os

from gpuyard.domain import hello
from gpuyard.locations import is_loopback
from gpuyard.services.access.front import FailureThrottle, HostRules


def test_a_loopback_bind_takes_the_loopback_names_on_its_port_only() -> None:
    rules = HostRules("127.0.0.1", 8765)
    for host in (b"127.0.0.1:8765", b"localhost:8765", b"[::1]:8765", b"LocalHost:8765"):
        assert rules.allows(host), host
    for host in (b"127.0.0.1:8766", b"evil.example:8765", b"127.0.0.1", b"", b"localhost.:8765"):
        assert not rules.allows(host), host


def test_a_named_bind_takes_that_name_and_public_names() -> None:
    rules = HostRules("10.1.2.3", 80, ["gpu.lab.example", "proxy.example:8443"])
    assert rules.allows(b"10.1.2.3:80")
    assert not rules.allows(b"127.0.0.1:80")  # not bound there
    assert rules.allows(b"gpu.lab.example") and rules.allows(b"gpu.lab.example:443")
    assert rules.allows(b"proxy.example:8443") and not rules.allows(b"proxy.example:9")
    assert not rules.allows(b"gpu.lab.example.evil.example")


def test_a_wildcard_bind_takes_the_machine_s_own_names() -> None:
    rules = HostRules("0.0.0.0", 8765, (), lambda: ["box", "10.0.0.5", "fe80::1"])
    for host in (b"box:8765", b"10.0.0.5:8765", b"[fe80::1]:8765", b"localhost:8765"):
        assert rules.allows(host), host
    assert not rules.allows(b"evil.example:8765")


def test_an_origin_is_this_server_or_refused() -> None:
    rules = HostRules("127.0.0.1", 8765, ["gpu.lab.example"])
    assert rules.allows_origin(b"http://127.0.0.1:8765")
    assert rules.allows_origin(b"https://gpu.lab.example")
    for origin in (b"null", b"http://evil.example", b"http://127.0.0.1:9", b"file://",
                   b"http://127.0.0.1:8765/x", b"javascript://127.0.0.1:8765"):  # fmt: skip
        assert not rules.allows_origin(origin), origin


def test_loopback_is_what_stays_on_this_machine() -> None:
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.1", "example.org", "")))


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_lets_a_burst_fail_then_refills() -> None:
    clock = _Clock()
    throttle = FailureThrottle(burst=3, per_s=0.5, clock=clock)
    for _ in range(3):
        assert throttle.retry_after_s("a") == 0
        throttle.failed("a")
    assert throttle.retry_after_s("a") == 2  # one try back after 1 / 0.5 s
    assert throttle.retry_after_s("b") == 0  # per address
    clock.now += 2
    assert throttle.retry_after_s("a") == 0
    clock.now += 100  # refilled: forgotten, the next request pays one dict lookup
    assert throttle.retry_after_s("a") == 0 and "a" not in throttle._buckets


def test_the_throttle_stays_bounded_under_a_scan_of_addresses() -> None:
    throttle = FailureThrottle(burst=1, per_s=0.001, max_keys=100, clock=_Clock())
    for i in range(1_000):
        throttle.failed(f"10.0.{i >> 8}.{i & 255}")
    assert len(throttle._buckets) <= 100


def test_the_hello_proof_needs_the_token_and_reveals_nothing_of_it() -> None:
    token = "s3cret-token"
    key, nonce = hello.token_key(token), os.urandom(32)
    answer = hello.proof(key, nonce)
    assert hello.check(key, nonce, answer)
    assert not hello.check(hello.token_key("another"), nonce, answer)
    assert not hello.check(key, os.urandom(32), answer)  # a replayed answer is worthless
    assert token not in answer and token not in hello.key_id(key)
    assert hello.key_id(key) != hello.key_id(hello.token_key("another"))
