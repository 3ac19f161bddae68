"""A gRPC interop server on Python grpcio (C-core), written from shared/spec/interop.md.

Used by `cargo xtask interop --peer grpcio` as an independent implementation to test our client against, and
by grpc-feature-tests (compression, client-side health checking). The protos are compiled at start-up with
grpc_tools.protoc into a temporary directory. They are copied under the import root `interop_pb`, because
generated modules named `grpc.testing` would collide with grpcio's own `grpc` package. Package and service
names on the wire stay `grpc.testing`.

Usage: python server.py --port=0 --proto_dir=PATH/TO/proto [--use_tls=true --tls_cert_file=PEM --tls_key_file=PEM
       [--tls_client_ca_file=PEM]]
With `--tls_client_ca_file` the TLS server requires a client certificate signed by that CA (mTLS).
                        [--health=false]
Prints `listening on 127.0.0.1:PORT` once it is serving.

Beyond the interop spec, for grpc-channel's tests:
- `UnaryCall` compresses its response with the algorithm named in the request header
  `x-test-response-compression` (gzip unless it says deflate) when asked to compress, and always reports the
  request payload size it decoded as the trailer `x-seen-size`. When the request carries
  `x-test-server-port: 1` it also answers the trailer `x-server-port` with the port this server listens on,
  so a test with several backends can tell which one served a call.
- `grpc.health.v1.Health` (grpcio-health-checking's `HealthServicer`: `Check` and `Watch`) is served, with
  the whole server (service name "") SERVING, unless `--health=false`; without it, `Check` and `Watch` answer
  UNIMPLEMENTED like any unknown method.
- Commands are read from stdin, one per line, after `listening on` is printed; each is answered with one line
  on stdout, `ok` or `error: WHY`:
      health SERVICE STATUS
  sets SERVICE's status (`Watch` streams on it get the new status) to STATUS, one of SERVING, NOT_SERVING,
  SERVICE_UNKNOWN or UNKNOWN. The empty service name (the whole server) is written `""` or `-`; a name is
  otherwise one word. Blank lines are ignored and get no answer. When stdin ends (or is /dev/null) the server
  keeps serving.
"""

import argparse
import importlib
import os
import pathlib
import re
import shlex
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_tools import protoc

ECHO_INITIAL = "x-grpc-test-echo-initial"
ECHO_TRAILING = "x-grpc-test-echo-trailing-bin"
# Not in the interop spec: which algorithm UnaryCall compresses its response with when asked to (gzip
# unless this says deflate), for grpc-channel's compression tests.
RESPONSE_COMPRESSION = "x-test-response-compression"
# Not in the interop spec: asks UnaryCall for the trailer `x-server-port` (this server's port), for tests that
# need to know which of several backends served a call.
ASK_SERVER_PORT = "x-test-server-port"
SERVER_PORT = "x-server-port"
ALGORITHMS = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}
CODES = {code.value[0]: code for code in grpc.StatusCode}


def compile_protos(proto_dir):
    out = pathlib.Path(tempfile.mkdtemp(prefix="grpcio-peer-"))
    src = out / "src" / "interop_pb"
    src.mkdir(parents=True)
    for name in ("empty.proto", "messages.proto", "test.proto"):
        text = (pathlib.Path(proto_dir) / "grpc" / "testing" / name).read_text()
        text = re.sub(r'import "grpc/testing/', 'import "interop_pb/', text)
        (src / name).write_text(text)
    gen = out / "gen"
    (gen / "interop_pb").mkdir(parents=True)
    (gen / "interop_pb" / "__init__.py").write_text("")
    args = [
        "grpc_tools.protoc",
        f"-I{out / 'src'}",
        f"--python_out={gen}",
        f"--grpc_python_out={gen}",
    ] + [f"interop_pb/{n}" for n in ("empty.proto", "messages.proto", "test.proto")]
    if protoc.main(args) != 0:
        raise SystemExit("grpc_tools.protoc failed")
    sys.path.insert(0, str(gen))
    return (
        importlib.import_module("interop_pb.empty_pb2"),
        importlib.import_module("interop_pb.messages_pb2"),
        importlib.import_module("interop_pb.test_pb2_grpc"),
    )


def make_servicer(empty_pb2, messages_pb2, test_pb2_grpc, port):
    """The TestService; `port` is a list holding the listening port once it is known."""

    def echo_metadata(context):
        md = dict(context.invocation_metadata())
        if ECHO_INITIAL in md:
            context.send_initial_metadata([(ECHO_INITIAL, md[ECHO_INITIAL])])
        if ECHO_TRAILING in md:
            context.set_trailing_metadata([(ECHO_TRAILING, md[ECHO_TRAILING])])

    def echo_status(request, context):
        if request.HasField("response_status") and request.response_status.code != 0:
            code = CODES.get(request.response_status.code, grpc.StatusCode.UNKNOWN)
            context.abort(code, request.response_status.message)

    def payload(size):
        return messages_pb2.Payload(type=messages_pb2.COMPRESSABLE, body=b"\x00" * size)

    def stream_responses(request, context):
        for params in request.response_parameters:
            if params.interval_us > 0:
                time.sleep(params.interval_us / 1e6)
            if params.HasField("compressed") and params.compressed.value:
                context.set_compression(grpc.Compression.Gzip)
            else:
                context.disable_next_message_compression()
            resp = messages_pb2.StreamingOutputCallResponse(payload=payload(params.size))
            if params.HasField("fill_peer_socket_address") and params.fill_peer_socket_address.value:
                resp.peer_socket_address = context.peer()
            yield resp

    class TestService(test_pb2_grpc.TestServiceServicer):
        def EmptyCall(self, request, context):
            echo_metadata(context)
            return empty_pb2.Empty()

        def UnaryCall(self, request, context):
            echo_metadata(context)
            echo_status(request, context)
            if request.response_type != messages_pb2.COMPRESSABLE:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported response_type")
            if request.HasField("response_compressed") and request.response_compressed.value:
                name = dict(context.invocation_metadata()).get(RESPONSE_COMPRESSION, "gzip")
                context.set_compression(ALGORITHMS.get(name, grpc.Compression.Gzip))
            else:
                context.set_compression(grpc.Compression.NoCompression)
            response = messages_pb2.SimpleResponse(payload=payload(request.response_size))
            # How much request payload arrived (decompressed), for the compression tests.
            trailers = (("x-seen-size", str(len(request.payload.body))),)
            if dict(context.invocation_metadata()).get(ASK_SERVER_PORT) == "1":
                trailers += ((SERVER_PORT, str(port[0])),)
            context.set_trailing_metadata(tuple(context.trailing_metadata() or ()) + trailers)
            return response

        def CacheableUnaryCall(self, request, context):
            echo_metadata(context)
            body = str(time.time_ns()).encode()
            return messages_pb2.SimpleResponse(payload=messages_pb2.Payload(body=body))

        def StreamingOutputCall(self, request, context):
            echo_metadata(context)
            echo_status(request, context)
            yield from stream_responses(request, context)

        def StreamingInputCall(self, request_iterator, context):
            echo_metadata(context)
            total = sum(len(r.payload.body) for r in request_iterator)
            return messages_pb2.StreamingInputCallResponse(aggregated_payload_size=total)

        def FullDuplexCall(self, request_iterator, context):
            echo_metadata(context)
            for request in request_iterator:
                echo_status(request, context)
                yield from stream_responses(request, context)

        def HalfDuplexCall(self, request_iterator, context):
            echo_metadata(context)
            requests = list(request_iterator)
            for request in requests:
                echo_status(request, context)
                yield from stream_responses(request, context)

        # UnimplementedCall is left to the generated base class, which answers UNIMPLEMENTED.

    return TestService()


def health_command(servicer, line):
    """Runs one stdin command; the line to answer with."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        return f"error: {e}"
    if len(words) != 3 or words[0] != "health":
        return "error: expected `health SERVICE STATUS`"
    if servicer is None:
        return "error: started with --health=false"
    service = "" if words[1] == "-" else words[1]
    try:
        status = health_pb2.HealthCheckResponse.ServingStatus.Value(words[2])
    except ValueError:
        return f"error: unknown status {words[2]!r}"
    servicer.set(service, status)
    return "ok"


def serve_commands(servicer):
    """Answers stdin's commands until it ends; the server keeps serving after that."""
    for line in sys.stdin:
        if line.strip():
            print(health_command(servicer, line), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--use_tls", default="false")
    parser.add_argument("--tls_cert_file", default="")
    parser.add_argument("--tls_key_file", default="")
    parser.add_argument("--tls_client_ca_file", default="")
    parser.add_argument("--health", default="true")
    parser.add_argument("--proto_dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "proto"))
    args = parser.parse_args()
    use_tls = args.use_tls.lower() in ("true", "1")
    with_health = args.health.lower() in ("true", "1")
    if use_tls and not (args.tls_cert_file and args.tls_key_file):
        raise SystemExit("--use_tls=true needs --tls_cert_file and --tls_key_file")
    empty_pb2, messages_pb2, test_pb2_grpc = compile_protos(args.proto_dir)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    listening = []
    test_pb2_grpc.add_TestServiceServicer_to_server(
        make_servicer(empty_pb2, messages_pb2, test_pb2_grpc, listening), server
    )
    health_servicer = None
    if with_health:
        health_servicer = health.HealthServicer()
        health_servicer.set(health.OVERALL_HEALTH, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if use_tls:
        with open(args.tls_key_file, "rb") as f:
            key = f.read()
        with open(args.tls_cert_file, "rb") as f:
            cert = f.read()
        if args.tls_client_ca_file:
            with open(args.tls_client_ca_file, "rb") as f:
                client_ca = f.read()
            credentials = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=client_ca, require_client_auth=True
            )
        else:
            credentials = grpc.ssl_server_credentials([(key, cert)])
        port = server.add_secure_port(f"127.0.0.1:{args.port}", credentials)
    else:
        port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    if port == 0:
        raise SystemExit(f"cannot listen on port {args.port}")
    listening.append(port)
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    threading.Thread(target=serve_commands, args=(health_servicer,), daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
