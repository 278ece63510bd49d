"""A web page cannot drive a local keyless server (issue 16 #9).

Browsers send forms and ``text/plain`` cross-origin without asking first, and a page behind a domain
re-pointed at 127.0.0.1 (DNS rebinding) sends its own domain as ``Host``: neither may start a response.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from api.helpers import MODEL
from api.test_engine_request import Recorder

BODY = b'{"model": "%s", "input": "run my code"}' % MODEL.encode()


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_bodies_a_page_can_send_without_preflight_are_refused(serve: Any, content_type: str | None) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    headers = {"Content-Type": content_type} if content_type else {}
    with httpx.Client() as client:
        request = client.build_request("POST", f"{live.root}/v1/responses", content=BODY, headers=headers)
        if content_type is None:
            request.headers.pop("Content-Type", None)
        response = client.send(request)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_content_type"
    assert recorder.requests == []  # nothing ran
    ok = httpx.post(f"{live.root}/v1/responses", content=BODY, headers={"Content-Type": "application/json"})
    assert ok.status_code == 200 and len(recorder.requests) == 1


def test_a_rebound_host_name_is_refused_on_a_loopback_bind(serve: Any) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    body = {"model": MODEL, "input": "hi"}
    port = live.root.rpartition(":")[2]
    refused = httpx.post(f"{live.root}/v1/responses", json=body, headers={"Host": f"attacker.example:{port}"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_host"
    assert httpx.get(f"{live.root}/v1/models", headers={"Host": "attacker.example"}).status_code == 400
    assert recorder.requests == []
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "app.localhost"):
        assert httpx.post(f"{live.root}/v1/responses", json=body, headers={"Host": host}).status_code == 200


def test_allowed_host_names_and_other_binds(serve: Any) -> None:
    recorder = Recorder()
    body = {"model": MODEL, "input": "hi"}
    live = serve(recorder.engine, allowed_hosts=("gateway.internal",))
    assert httpx.post(f"{live.root}/v1/responses", json=body, headers={"Host": "gateway.internal"}).status_code == 200
    assert httpx.post(f"{live.root}/v1/responses", json=body, headers={"Host": "other.internal"}).status_code == 400
    # Bound to all interfaces, the server cannot know its names: nothing is checked.
    anywhere = serve(Recorder().engine, host="0.0.0.0")
    assert httpx.post(f"{anywhere.root}/v1/responses", json=body, headers={"Host": "gpu-box.lan"}).status_code == 200
