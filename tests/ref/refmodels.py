"""Model-file helpers shared by sotto's reference tests: a CTranslate2
model.bin reader and a hand-written safetensors writer (numpy + json only).

CTranslate2 model.bin (little endian; binary versions 4..6), as described at
the top of engine/load_ct2.c:
  u32 version, string spec_name, u32 spec_revision, u32 n_variables,
  n x { string name, u8 rank, u32 dims[rank], u8 dtype, u32 n_bytes, data },
  u32 n_aliases, n x { string alias, string target }
where a string is u16 length (including the trailing NUL) + bytes, and dtype
is 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16.
"""
import json
import struct

import numpy as np

CT2_DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
_NP = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}


class CT2Model:
    """A parsed model.bin: version, spec, revision, variables (name -> numpy
    array; bfloat16 comes back as float32), their CT2 dtype ids, aliases."""

    def __init__(self, version, spec, revision, variables, dtypes, aliases):
        self.version = version
        self.spec = spec
        self.revision = revision
        self.variables = variables
        self.dtypes = dtypes
        self.aliases = aliases


def _bf16_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def read_ct2(path):
    """Parses a CTranslate2 model.bin with struct (no ctranslate2 import)."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def u32():
        nonlocal pos
        (v,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        return v

    def u8():
        nonlocal pos
        v = buf[pos]
        pos += 1
        return v

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<H", buf, pos)
        pos += 2
        s = buf[pos:pos + n]
        pos += n
        if not s or s[-1] != 0:
            raise ValueError(f"{path}: corrupt string at byte {pos - n}")
        return s[:-1].decode("utf-8")

    version = u32()
    if not 4 <= version <= 6:
        raise ValueError(f"{path}: unsupported CTranslate2 binary version {version}")
    spec = string()
    revision = u32()
    n = u32()
    variables, dtypes = {}, {}
    for _ in range(n):
        name = string()
        rank = u8()
        dims = [u32() for _ in range(rank)]
        dt = u8()
        nbytes = u32()
        if dt not in _NP:
            raise ValueError(f"{path}: variable {name} has unknown dtype {dt}")
        a = np.frombuffer(buf, dtype=np.dtype(_NP[dt]).newbyteorder("<"), count=nbytes // np.dtype(_NP[dt]).itemsize,
                          offset=pos).reshape(dims)
        if dt == 5:
            a = _bf16_to_f32(a)
        pos += nbytes
        variables[name] = a
        dtypes[name] = dt
    aliases = {}
    if pos < len(buf):
        for _ in range(u32()):
            a = string()
            aliases[a] = string()
    return CT2Model(version, spec, revision, variables, dtypes, aliases)


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: numpy array} as a safetensors file: u64 header length,
    JSON header (padded with spaces to a multiple of 8), then the data of each
    tensor in order, little endian. Supported dtypes: float32, float16, int8,
    int16, int32, uint8."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int8): "I8",
             np.dtype(np.int16): "I16", np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = names[a.dtype]
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (F32/F16/BF16 -> as stored,
    BF16 as float32)."""
    np_of = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I8": np.int8, "I16": np.int16,
             "I32": np.int32, "U8": np.uint8}
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b, e = d["data_offsets"]
        a = np.frombuffer(buf[base + b:base + e], dtype=np.dtype(np_of[d["dtype"]]).newbyteorder("<"))
        if d["dtype"] == "BF16":
            a = _bf16_to_f32(a)
        out[name] = a.reshape(d["shape"])
    return out
