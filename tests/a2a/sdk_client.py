"""Drive a capsule's A2A endpoint with the official A2A Python SDK and report what it saw.

Run by tests/e2e/a2a_sdk.rs, which starts the capsule and the provider stub, scripts the
stub's turns in the order of the steps below, and checks the JSON this prints. The script
itself asserts nothing: it records what the SDK returned, so the Rust test says what is right.

Usage: sdk_client.py <base url> <protocol version: 1.0|0.3> <token> <expired token>
"""

import asyncio
import json
import sys

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
)


class Token(CredentialService):
    """Answers every scheme with one token (what the SDK's auth interceptor asks)."""

    def __init__(self, token):
        self.token = token

    async def get_credentials(self, security_scheme_name, context):
        return self.token


def message(text):
    return SendMessageRequest(
        message=Message(message_id=f"m-{text[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)])
    )


def event(e):
    """One stream response as plain JSON (protobuf field names)."""
    return json_format.MessageToDict(e, preserving_proto_field_name=True)


def refusal(e):
    return {"type": type(e).__name__, "text": str(e)}


async def collect(stream, stop_after=None):
    out = []
    async for e in stream:
        out.append(event(e))
        if stop_after is not None and stop_after(out):
            break
    return out


def artifact_events(events):
    return [e for e in events if "artifact_update" in e]


async def main(url, version, token, expired):
    http = httpx.AsyncClient(timeout=60)
    card = await A2ACardResolver(http, url).get_agent_card()
    report = {
        "card": {
            "interfaces": [[i.url, i.protocol_binding, i.protocol_version] for i in card.supported_interfaces],
            "schemes": sorted(card.security_schemes.keys()),
            "bearer": card.security_schemes["bearer"].http_auth_security_scheme.scheme
            if "bearer" in card.security_schemes
            else None,
        }
    }
    # Talk over the interface of the version under test only.
    keep = [i for i in card.supported_interfaces if i.protocol_version == version]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)

    def client(streaming, credential):
        interceptors = [AuthInterceptor(Token(credential))] if credential is not None else []
        return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card, interceptors)

    streaming = client(True, token)
    plain = client(False, token)
    report["transport"] = type(streaming._transport).__name__

    # 1. send, not streaming: the whole task at the end.
    report["send"] = await collect(plain.send_message(message("hello")))

    # 2. stream: a tool call, then text.
    report["stream"] = await collect(streaming.send_message(message("use the tool")))
    task_id = report["stream"][0]["task"]["id"]

    # 3. get.
    report["get"] = event(await streaming.get_task(GetTaskRequest(id=task_id)))

    # 4. list (v1.0 only: v0.3 has no list method).
    if version == "1.0":
        report["list"] = event(await streaming.list_tasks(ListTasksRequest(page_size=1)))
        try:
            await streaming.list_tasks(ListTasksRequest(page_size=1000))
            report["list_too_big"] = None
        except Exception as e:  # noqa: BLE001 - the report names whatever the SDK raised
            report["list_too_big"] = refusal(e)

    # 5. cancel a running task while streaming it.
    events = []
    async for e in streaming.send_message(message("a long one")):
        events.append(event(e))
        if len(artifact_events(events)) == 1 and "cancel" not in report:
            report["cancel"] = event(
                await streaming.cancel_task(CancelTaskRequest(id=events[0]["task"]["id"]))
            )
    report["canceled_stream"] = events
    try:
        await streaming.cancel_task(CancelTaskRequest(id=events[0]["task"]["id"]))
        report["cancel_again"] = None
    except Exception as e:  # noqa: BLE001
        report["cancel_again"] = refusal(e)

    # 6. cut a stream mid-task, then subscribe again.
    first = await collect(
        streaming.send_message(message("a slow one")), stop_after=lambda out: len(artifact_events(out)) >= 3
    )
    report["cut"] = first
    report["resubscribed"] = await collect(streaming.subscribe(SubscribeToTaskRequest(id=first[0]["task"]["id"])))

    # 7. input-required: a tool asks a person; the stream ends at input-required, and the next
    # message on the same task answers it.
    asking = await collect(streaming.send_message(message("ask me")))
    report["asking"] = asking
    waiting = asking[0]["task"]
    answer = Message(
        message_id="m-answer",
        role=Role.ROLE_USER,
        task_id=waiting["id"],
        context_id=waiting["context_id"],
        parts=[Part(text="main")],
    )
    report["answered"] = await collect(streaming.send_message(SendMessageRequest(message=answer)))

    # 8. unknown task.
    try:
        await streaming.get_task(GetTaskRequest(id="tsk_unknown"))
        report["unknown"] = None
    except Exception as e:  # noqa: BLE001
        report["unknown"] = refusal(e)

    # 9. tokens: missing, wrong, expired (a previous session's).
    report["refused"] = {}
    for what, credential in [("missing", None), ("wrong", "not-the-token"), ("expired", expired)]:
        try:
            await collect(client(False, credential).send_message(message("not allowed")))
            report["refused"][what] = None
        except Exception as e:  # noqa: BLE001
            report["refused"][what] = refusal(e)

    await http.aclose()
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
