#!/usr/bin/env python3
"""tests/ref/tfevents_read.py - a reader of TensorBoard event files in plain Python (no
tensorboard, no protobuf: Debian's /usr/bin/python3 as it comes), for tests/test_tfevents.c.
Written from the formats, not from src/metrics/tfevents.c: TFRecord framing (uint64 length LE,
masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data; mask(c) =
((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32) and the protobuf wire format of
tensorflow's Event (wall_time double 1, step int64 2, file_version string 3, summary 5) and
Summary (repeated Value 1: tag string 1, simple_value float 2).

    python3 tests/ref/tfevents_read.py FILE...
        prints a JSON object a line for each event of each file, in order:
        {"file": F, "wall_time": W, "step": S, "file_version": V} or
        {"file": F, "wall_time": W, "step": S, "tag": T, "value": X} (one line per value),
        floats as Python's repr (exact: a float32 value read back as a double prints so
        that strtod gives it back). A damaged file (bad CRC, cut short, a field or wire type
        outside the above, a repeated field) exits 1 naming the file, the record and its
        byte offset.

Deliberately strict: it accepts only what an event file of scalars needs, so a stray byte in
what tubelet writes fails the test instead of being skipped."""
import json
import struct
import sys

CASTAGNOLI = 0x82F63B78  # reflected polynomial


def make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ CASTAGNOLI if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = make_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def varint(buf, pos):
    """(value, next position) of the varint at pos: at most 10 bytes, all present."""
    v = 0
    for k in range(10):
        if pos + k >= len(buf):
            raise Bad("a varint runs past the end of its message")
        b = buf[pos + k]
        v |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            if v >= 1 << 64:
                raise Bad("a varint of more than 64 bits")
            return v, pos + k + 1
    raise Bad("a varint longer than 10 bytes")


def fields(buf):
    """The (field number, wire type, value) triples of a message: varints as int, fixed64
    and fixed32 as their bytes, length-delimited ones as bytes."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Bad("field number 0")
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise Bad("a fixed%d field runs past the end of its message" % (8 * size))
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 2:
            size, pos = varint(buf, pos)
            if pos + size > len(buf):
                raise Bad("field %d's %d bytes run past the end of its message" % (number, size))
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise Bad("wire type %d (field %d)" % (wire, number))
        out.append((number, wire, value))
    return out


def once(message, what):
    """The fields of a message, refusing a field number seen twice."""
    seen = set()
    for number, wire, value in fields(message):
        if number in seen:
            raise Bad("%s field %d twice" % (what, number))
        seen.add(number)
        yield number, wire, value


def expect(wire, want, what):
    if wire != want:
        raise Bad("%s has wire type %d, not %d" % (what, wire, want))


def summary_values(buf):
    values = []
    for number, wire, value in fields(buf):
        if number != 1:
            raise Bad("Summary field %d" % number)
        expect(wire, 2, "Summary.value")
        tag, simple = None, None
        for n, w, v in once(value, "Summary.Value"):
            if n == 1:
                expect(w, 2, "Summary.Value.tag")
                tag = v.decode("utf-8")
            elif n == 2:
                expect(w, 5, "Summary.Value.simple_value")
                simple = struct.unpack("<f", v)[0]
            else:
                raise Bad("Summary.Value field %d" % n)
        if tag is None or simple is None:
            raise Bad("a Summary.Value without its tag or simple_value")
        values.append((tag, simple))
    return values


def event(buf):
    """The Event's wall time, step, file version (or None) and summary values."""
    wall, step, version, values = None, 0, None, []
    for number, wire, value in once(buf, "Event"):
        if number == 1:
            expect(wire, 1, "Event.wall_time")
            wall = struct.unpack("<d", value)[0]
        elif number == 2:
            expect(wire, 0, "Event.step")
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            expect(wire, 2, "Event.file_version")
            version = value.decode("utf-8")
        elif number == 5:
            expect(wire, 2, "Event.summary")
            values = summary_values(value)
        else:
            raise Bad("Event field %d" % number)
    if wall is None:
        raise Bad("an Event without wall_time")
    if (version is None) == (not values):
        raise Bad("an Event with neither or both of file_version and summary")
    return wall, step, version, values


def records(data):
    """(offset, bytes) of each TFRecord, both CRCs checked."""
    pos, n = 0, 0
    while pos < len(data):
        where = "record %d (byte %d)" % (n, pos)
        if pos + 12 > len(data):
            raise Bad("%s: cut short in its header" % where)
        head = data[pos:pos + 8]
        (size,) = struct.unpack("<Q", head)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(head)) != crc:
            raise Bad("%s: the length's CRC does not match" % where)
        if pos + 12 + size + 4 > len(data):
            raise Bad("%s: cut short: %d bytes announced" % (where, size))
        body = data[pos + 12:pos + 12 + size]
        (crc,) = struct.unpack("<I", data[pos + 12 + size:pos + 16 + size])
        if masked(crc32c(body)) != crc:
            raise Bad("%s: the data's CRC does not match" % where)
        yield where, body
        pos += 16 + size
        n += 1


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    lines, first = [], True
    for where, body in records(data):
        try:
            wall, step, version, values = event(body)
        except Bad as e:
            raise Bad("%s: %s" % (where, e))
        if first and version != "brain.Event:2":
            raise Bad("%s: the first event is not file_version brain.Event:2" % where)
        if not first and version is not None:
            raise Bad("%s: a second file_version" % where)
        first = False
        base = {"file": path, "wall_time": wall, "step": step}
        if version is not None:
            lines.append(dict(base, file_version=version))
        for tag, value in values:
            lines.append(dict(base, tag=tag, value=value))
    if first:
        raise Bad("no records")
    return lines


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    out = []
    for path in paths:
        try:
            out.extend(read(path))
        except Bad as e:
            print("tfevents_read.py: %s: %s" % (path, e), file=sys.stderr)
            return 1
    for line in out:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
