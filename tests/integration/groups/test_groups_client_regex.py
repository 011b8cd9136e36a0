"""A group's subscribed_topic_regex is a client's pattern: it runs under RE2 (linear time).
Here: it matches as before, and what RE2 cannot run is refused. That a backtracking pattern
no longer freezes the broker is tests/e2e/test_e2e_robustness.py's (a frozen loop holds the
GIL, so only a client in another process can notice)."""

from __future__ import annotations

import pytest
from groups_api_helpers import create_topic
from starlette.testclient import TestClient


def test_a_nested_quantifier_matches_whole_names(gclient: TestClient) -> None:
    create_topic(gclient, "aaaaa", 1)
    create_topic(gclient, "aab", 1)
    create_topic(gclient, "xaab", 1)
    body = {"member_epoch": 0, "subscribed_topic_regex": "(a+)+b"}
    parts: list[object] = []
    for _ in range(5):  # the regex is resolved on the join; the assignment follows
        r = gclient.post("/groups/g/heartbeat", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        body = {"member_id": answer["member_id"], "member_epoch": answer["member_epoch"]}
        parts = (answer.get("assignment") or {}).get("partitions") or parts
    assert parts == [{"topic": "aab", "partitions": [0]}]
    assert gclient.get("/healthz").status_code == 200


@pytest.mark.parametrize("pattern", [r"(a)\1", r"a(?=b)", r"(?<=a)b", "("])
def test_patterns_re2_cannot_run_are_refused(gclient: TestClient, pattern: str) -> None:
    r = gclient.post(
        "/groups/g/heartbeat", json={"member_epoch": 0, "subscribed_topic_regex": pattern}
    )
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_REQUEST"
    assert "subscribed_topic_regex" in body["message"]
