"""Limits, share and usage through the API in-process, with a real second user's token: admins
set limits (403 for others), a submission a limit refuses is 429 `quota_exceeded` in one line,
users see their own share and usage rows."""

from __future__ import annotations

from tests.api.test_tokens_accounts import Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture


def _submit(rig: Rig, token: str, gpus: int) -> tuple[int, dict[str, object]]:
    body = {"command": ["sleep", "30"], "workdir": rig.workdir, "gpus": gpus}
    resp = rig.as_(token).post("/api/v1/jobs", json=body)
    answer = resp.json()
    return resp.status_code, answer.get("error", answer)


def test_admins_set_limits_and_submit_is_refused_429(rig: Rig) -> None:
    assert _add_user(rig, "nobody").status_code == 201
    nobody = rig.token_of("nobody")
    put = rig.admin().put("/api/v1/admin/limits/user/nobody", json={"max_gpus": 1})
    assert put.status_code == 200, put.text
    assert (put.json()["max_gpus"], put.json()["shares"]) == (1, None)
    assert (
        rig.as_(nobody).put("/api/v1/admin/limits/user/nobody", json={"max_gpus": 9}).status_code
        == 403
    )
    status, body = _submit(rig, nobody, 2)
    assert status == 429, body
    assert body["code"] == "quota_exceeded"
    assert body["message"] == "job asks 2 GPUs; user nobody may hold at most 1 GPUs at once"
    rig.admin().put("/api/v1/admin/limits/team/default", json={"max_pending": 0})
    status, body = _submit(rig, nobody, 1)
    assert (status, body["code"]) == (429, "quota_exceeded")
    assert str(body["message"]).startswith("team default has 0 jobs pending")
    listed = rig.as_(nobody).get("/api/v1/admin/limits").json()
    assert sorted((e["kind"], e["name"]) for e in listed) == [("team", "default"),
                                                            ("user", "nobody")]  # fmt: skip
    assert rig.admin().delete("/api/v1/admin/limits/team/default").status_code == 204
    assert rig.admin().delete("/api/v1/admin/limits/team/default").status_code == 404
    assert rig.admin().delete("/api/v1/admin/limits/user/nobody").status_code == 204
    assert _submit(rig, nobody, 2)[0] == 201


def test_limits_are_validated(rig: Rig) -> None:
    admin = rig.admin()
    assert admin.put("/api/v1/admin/limits/user/ghost", json={"max_gpus": 1}).status_code == 404
    me = admin.get("/api/v1/whoami").json()["user"]
    url = f"/api/v1/admin/limits/user/{me}"
    assert admin.put(url, json={"max_gpus": -1}).status_code == 422
    assert admin.put(url, json={"max_gpu": 1}).status_code == 422
    assert admin.put(url, json={"shares": 0}).status_code == 422
    assert admin.put("/api/v1/admin/limits/group/x", json={}).status_code == 422
    made = admin.put(url, json={"max_gpu_hours": 100, "window_s": 86400, "shares": 2})
    assert made.status_code == 200
    assert (made.json()["max_gpu_hours"], made.json()["window_s"]) == (100.0, 86400.0)


def test_share_and_usage_rows(rig: Rig) -> None:
    _add_user(rig, "nobody")
    nobody = rig.token_of("nobody")
    everyone = rig.admin().get("/api/v1/share").json()
    me = rig.admin().get("/api/v1/whoami").json()["user"]
    assert {r["user"] for r in everyone} == {me, "nobody"}
    assert all(r["factor"] == 1.0 and r["norm_shares"] == 0.5 for r in everyone)
    mine = rig.as_(nobody).get("/api/v1/share").json()
    assert [r["user"] for r in mine] == ["nobody"]
    assert rig.admin().get("/api/v1/usage?by=team&since=0").json() == []
    assert rig.admin().get("/api/v1/usage?by=machine").status_code == 422
    for since in ("nan", "inf", "-inf", "1e300"):
        assert rig.admin().get(f"/api/v1/usage?since={since}").status_code == 422
