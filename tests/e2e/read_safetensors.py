#!/usr/bin/env python3
"""An independent safetensors reader (the format's spec, with numpy only): prints one line per
tensor, "name dtype shape sum first-value", so a test can compare with what trainer wrote."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}

with open(sys.argv[1], "rb") as f:
    raw = f.read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8 : 8 + n])
data = raw[8 + n :]
meta = header.pop("__metadata__", {})
print("metadata", json.dumps(meta, sort_keys=True))
for name, t in header.items():
    b, e = t["data_offsets"]
    a = np.frombuffer(data[b:e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    first = a.reshape(-1)[0] if a.size else 0
    print(name, t["dtype"], "x".join(map(str, t["shape"])) or "scalar", repr(float(a.astype(np.float64).sum())), repr(float(first)))
