"""The middle floor: use cases and the live loop, in rooms; adapters plug in through the ports.

One line a room: what it holds, and what it may import (besides `gpuyard.domain`,
`gpuyard.scheduling`, `gpuyard.jobhooks` and the top modules). Low to high: a room imports only
rooms above it in this list, never one below (`tests/test_import_contract.py` holds it, and no
import cycle anywhere).

    ports.py, stores.py  the Protocols adapters implement (job store, executor, GPUs; the other
                         stores and their `Stores` bundle); import no room
    metrics.py           the queue's own counters for /metrics; no room
    ticker.py            a background thread's loop; no room
    launch/              where a process starts: the launch plan, environment, run-as, rendezvous,
                         a service job's port and health check, OOM reading; no room
    scheduler/           the live pass: the policy fed with events, GPU binding, estimates;
                         launch
    access/              who is acting and what they may do: front-door checks, tokens, peers,
                         web sessions, accounts, quotas, `rules.py` (the one authorisation
                         table); launch, scheduler
    jobs/                where a job changes: the journal, book, observers, change feed,
                         controller, stops, drains, disk waits, dependencies, and the use cases
                         (submit, admission, reads, verbs); launch, scheduler, access
    machine/             the GPUs as the server sees them: telemetry, GPU history and health,
                         `--gpu-mem`, idle jobs, the event ring; launch, scheduler, jobs (the
                         book's reads and the journal's changes, as an observer)
    workflows/           sweeps, progress, notifications: built on jobs; everything above
    server.py            `ServerFacade`, what the API serves: every room
"""
