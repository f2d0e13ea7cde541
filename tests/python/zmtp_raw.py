"""Raw ZMTP 3 bytes for hostile peers, written by hand on purpose.

libzmq never emits a truncated READY or a frame that declares 2^62 bytes, so
the hostile-input suite builds those frames itself and writes them to plain
TCP sockets. The layout follows ZMTP 3.0 (RFC 23/ZMTP): a 64-byte greeting,
then frames of one flags byte (bit 0 more, bit 1 long size, bit 2 command)
and a 1-byte or 8-byte big-endian size.
"""
import socket
import time

FLAG_LONG = 0x02
FLAG_COMMAND = 0x04


def greeting(as_server=False, mechanism=b"NULL"):
    """The 64-byte ZMTP 3.0 greeting."""
    return (
        b"\xff" + b"\x00" * 8 + b"\x7f"
        + bytes([3, 0])
        + mechanism.ljust(20, b"\x00")
        + bytes([1 if as_server else 0])
        + b"\x00" * 31
    )


def frame(body, command=False, declared=None):
    """One frame; declared overrides the size written in its header."""
    size = len(body) if declared is None else declared
    flags = FLAG_COMMAND if command else 0
    if size > 255:
        return bytes([flags | FLAG_LONG]) + size.to_bytes(8, "big") + body
    return bytes([flags, size]) + body


def ready(socket_type=b"PUB"):
    """A well-formed READY command with the Socket-Type property."""
    name = b"Socket-Type"
    body = b"\x05READY" + bytes([len(name)]) + name + len(socket_type).to_bytes(4, "big") + socket_type
    return frame(body, command=True)


def ready_truncated_property():
    """A READY whose property value declares 4096 bytes but carries 3: the
    frame itself is consistent, the property inside runs past its end."""
    name = b"Socket-Type"
    body = b"\x05READY" + bytes([len(name)]) + name + (4096).to_bytes(4, "big") + b"PUB"
    return frame(body, command=True)


def huge_command_header():
    """A command frame header declaring 2^62 bytes, followed by a few."""
    return frame(b"\x05READY", command=True, declared=2**62)


def huge_message_header():
    """A message frame header declaring 2^62 bytes, followed by a few."""
    return frame(b"hostile", declared=2**62)


def connect(port, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_greeting(s, timeout=3.0):
    """Reads the peer's 64-byte greeting; returns what arrived."""
    s.settimeout(timeout)
    got = b""
    try:
        while len(got) < 64:
            chunk = s.recv(64 - len(got))
            if not chunk:
                break
            got += chunk
    except (socket.timeout, OSError):
        pass
    return got


def closed_by_peer(s, within):
    """True when the peer closes (EOF or reset) within `within` seconds;
    whatever it sends first is read and ignored."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
