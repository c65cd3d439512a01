# An independent reader of TensorBoard event files: its own CRC-32C, python3-protobuf and tb_events.proto.
"""Usage: read_events.py TB_DIR

Reads every events file in TB_DIR (names containing "tfevents", in name order). For each record it
checks both masked CRC-32Cs, parses an Event with classes protoc generates from tb_events.proto
(this folder's own copy of TensorBoard's schema), and checks that the Event re-encodes to the very
bytes read (nothing outside the schema, no unknown field). Prints JSON on stdout:

  {"files": [{"name": ..., "records": N, "file_version": ..., "writer": ...}],
   "events": [{"file": i, "step": s, "wall_time": t,
               "values": [{"tag": ..., "simple_value": v}
                          | {"tag": ..., "plugin": ..., "dtype": d, "dims": [...], "strings": [...]}]}]}

where a non-finite simple_value is written as the string "nan", "inf" or "-inf". Any fault (a CRC,
a record cut short, an Event that does not parse or re-encode differently, a first record that is
not the file_version or a later one that is) is one line on stderr and exit status 1.
"""
import atexit
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    sys.stderr.write("read_events.py: " + msg + "\n")
    sys.exit(1)


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    index = 0
    while at < len(data):
        where = "%s: record %d at byte %d" % (path, index, at)
        if len(data) - at < 12:
            fail(where + ": cut short in its header")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if length_crc != masked(header):
            fail(where + ": length CRC does not match")
        if len(data) - at - 12 < length + 4:
            fail(where + ": cut short in its data")
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if body_crc != masked(body):
            fail(where + ": data CRC does not match")
        yield index, body
        at += 16 + length
        index += 1


def number(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def main():
    if len(sys.argv) != 2:
        fail("usage: read_events.py TB_DIR")
    tb_dir = sys.argv[1]
    out_dir = tempfile.mkdtemp(prefix="tb_events_pb2_")
    atexit.register(shutil.rmtree, out_dir, ignore_errors=True)  # (each run left one behind)
    subprocess.run(["protoc", "--proto_path=" + HERE, "--python_out=" + out_dir, "tb_events.proto"], check=True)
    sys.path.insert(0, out_dir)
    import tb_events_pb2 as pb  # noqa: E402 (generated just now)

    names = sorted(n for n in os.listdir(tb_dir) if "tfevents" in n)
    result = {"files": [], "events": []}
    for file_index, name in enumerate(names):
        path = os.path.join(tb_dir, name)
        count = 0
        info = {"name": name}
        for index, body in records(path):
            event = pb.Event()
            try:
                event.ParseFromString(body)
            except Exception as e:  # noqa: BLE001 (the message is what matters)
                fail("%s: record %d does not parse as an Event: %s" % (path, index, e))
            if event.SerializeToString() != body:
                fail("%s: record %d re-encodes differently (fields outside the schema?)" % (path, index))
            what = event.WhichOneof("what")
            if index == 0:
                if what != "file_version":
                    fail("%s: the first record is not a file_version Event (%s)" % (path, what))
                info["file_version"] = event.file_version
                info["writer"] = event.source_metadata.writer
                info["wall_time"] = event.wall_time
            elif what != "summary":
                fail("%s: record %d holds %s, not a summary" % (path, index, what))
            else:
                values = []
                for v in event.summary.value:
                    kind = v.WhichOneof("value")
                    if kind == "simple_value":
                        values.append({"tag": v.tag, "simple_value": number(v.simple_value)})
                    elif kind == "tensor":
                        t = v.tensor
                        values.append({"tag": v.tag, "plugin": v.metadata.plugin_data.plugin_name,
                                       "plugin_content": v.metadata.plugin_data.content.hex(),
                                       "dtype": t.dtype, "dims": [d.size for d in t.tensor_shape.dim],
                                       "strings": [s.decode("utf-8") for s in t.string_val]})
                    else:
                        fail("%s: record %d: value %s holds %s" % (path, index, v.tag, kind))
                result["events"].append({"file": file_index, "step": event.step, "wall_time": event.wall_time,
                                         "values": values})
            count += 1
        info["records"] = count
        result["files"].append(info)
    json.dump(result, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
