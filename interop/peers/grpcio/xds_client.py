"""An xDS client on Python grpcio (C-core), driven by grpc-channel's tests (crates/channel/tests/xds_grpcio.rs).

grpcio is an xDS client: a channel to `xds:///NAME` reads its bootstrap from GRPC_XDS_BOOTSTRAP (set by the
test), fetches the Listener NAME, its routes, clusters and endpoints from the management server the bootstrap
names, and routes each call as the routes say. The tests script our management server
(`interop::xds_server`) and check what this independent client does with the same resources our channel
gets, so the test server's resources are proven to be what a real xDS client accepts.

Usage: GRPC_XDS_BOOTSTRAP=FILE python xds_client.py --target=xds:///NAME [--proto_dir=PATH/TO/proto]
       [--secure_mode=true]
With `--secure_mode=true` (the flag of grpc's own xDS interop client) the channel uses xDS credentials
(gRFC A29, `grpc.xds_channel_credentials` with the fallback `grpc.experimental.insecure_channel_credentials()`,
where Python keeps the insecure channel credentials): a Cluster's UpstreamTlsContext gives
TLS/mTLS with the bootstrap's `certificate_providers`, a Cluster without one plaintext.
Prints `ready` once the channel exists (it connects lazily, on the first call). Then reads commands from
stdin, one JSON object per line, and answers each with one JSON line on stdout:

    {"method": "/grpc.testing.TestService/UnaryCall", "calls": 20, "metadata": [["k", "v"]],
     "timeout": 10, "wait_for_ready": false}

makes `calls` unary calls one after another (each with the metadata, the timeout in seconds, and
wait-for-ready as given) and answers

    {"served": {"SERVER_ID": COUNT, ...}, "codes": {"OK": N, "UNAVAILABLE": N, ...},
     "trailers": [{"key": "value", ...}, ...], "details": ["...", ...]}

`UnaryCall` asks the server for its id (`fill_server_id`), counted in `served` (our interop server answers
its address); any other method is sent an empty message as raw bytes and its successes count under "".
`trailers` lists each call's trailing metadata (text entries), `details` the first five error messages.
"""

import argparse
import json
import os
import sys

import grpc
import grpc.experimental

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import compile_protos  # noqa: E402

UNARY_CALL = "/grpc.testing.TestService/UnaryCall"


def run_command(channel, messages_pb2, command):
    method = command.get("method", UNARY_CALL)
    metadata = [tuple(entry) for entry in command.get("metadata", [])]
    timeout = float(command.get("timeout", 10))
    wait_for_ready = bool(command.get("wait_for_ready", False))
    if method == UNARY_CALL:
        stub = channel.unary_unary(
            method,
            request_serializer=messages_pb2.SimpleRequest.SerializeToString,
            response_deserializer=messages_pb2.SimpleResponse.FromString,
        )
        request = messages_pb2.SimpleRequest(fill_server_id=True)
    else:
        stub = channel.unary_unary(method)
        request = b""
    served, codes, trailers, details = {}, {}, [], []
    for _ in range(int(command.get("calls", 1))):
        try:
            response, call = stub.with_call(
                request, timeout=timeout, metadata=metadata, wait_for_ready=wait_for_ready
            )
            server = response.server_id if method == UNARY_CALL else ""
            served[server] = served.get(server, 0) + 1
            code = "OK"
            trailing = call.trailing_metadata()
        except grpc.RpcError as error:
            code = error.code().name
            trailing = error.trailing_metadata()
            if len(details) < 5:
                details.append(error.details() or "")
        codes[code] = codes.get(code, 0) + 1
        trailers.append(
            {k: v for k, v in (trailing or ()) if isinstance(v, str)}
        )
    return {"served": served, "codes": codes, "trailers": trailers, "details": details}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument(
        "--proto_dir",
        default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "proto"),
    )
    parser.add_argument("--secure_mode", default="false")
    args = parser.parse_args()
    _, messages_pb2, _ = compile_protos(args.proto_dir)
    if args.secure_mode.lower() in ("true", "1"):
        credentials = grpc.xds_channel_credentials(
            fallback_credentials=grpc.experimental.insecure_channel_credentials()
        )
        channel = grpc.secure_channel(args.target, credentials)
    else:
        channel = grpc.insecure_channel(args.target)
    print("ready", flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            answer = run_command(channel, messages_pb2, json.loads(line))
        except Exception as error:  # a bad command: say so and go on
            answer = {"error": repr(error)}
        print(json.dumps(answer), flush=True)
    channel.close()


if __name__ == "__main__":
    main()
