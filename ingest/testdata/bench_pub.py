"""The pyzmq engine publisher of TestBenchZMQToKafka (ingest/benchzmq_test.go).

A libzmq XPUB (the wire of vLLM's PUB, plus a way to see the subscription)
binds, prints "addr <endpoint>", waits for ingest's subscription, prints
"start", sends [topic "", seq, payload] for seqs 0..n-1 cycling through the
payloads of the file (4-byte big-endian length + bytes each), and stays up
until stdin closes. The send high-water mark is unlimited so a publisher
faster than ingest queues instead of dropping: the measurement counts
every batch.
"""
import struct
import sys

import zmq


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    data = open(path, "rb").read()
    payloads, i = [], 0
    while i + 4 <= len(data):
        (size,) = struct.unpack_from(">I", data, i)
        payloads.append(data[i + 4 : i + 4 + size])
        i += 4 + size
    seqs = [struct.pack(">Q", s) for s in range(n)]
    sock = zmq.Context().socket(zmq.XPUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(f"addr tcp://127.0.0.1:{port}", flush=True)
    sock.recv()  # the subscription
    print("start", flush=True)
    send, m, empty = sock.send_multipart, len(payloads), b""
    for s in range(n):
        send([empty, seqs[s], payloads[s % m]])
    sys.stdin.read()
    sock.close(linger=5000)


if __name__ == "__main__":
    main()
