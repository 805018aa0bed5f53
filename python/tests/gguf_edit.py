"""A minimal GGUF (v2/v3) rewriter for the tests: change metadata, keep every tensor's bytes.

Tensor offsets are relative to the data section, so only the metadata is rewritten and the data
section is copied as it is, re-aligned.
"""
import struct

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            itype, n = self.take("<I"), self.take("<Q")
            return (itype, [self.value(itype) for _ in range(n)])
        return self.take(_SCALARS[vtype])


def _string(s):
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == STRING:
        return _string(v)
    if vtype == ARRAY:
        itype, items = v
        return struct.pack("<IQ", itype, len(items)) + b"".join(_value(itype, x) for x in items)
    return struct.pack(_SCALARS[vtype], v)


def read(path):
    """(version, [(key, type, value)], [raw tensor-info bytes], alignment, data bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    assert data[:4] == b"GGUF", f"{path}: not a GGUF file"
    r.pos = 4
    version = r.take("<I")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        kvs.append((key, vtype, r.value(vtype)))
    infos = []
    for _ in range(n_tensors):
        start = r.pos
        r.string()
        n_dims = r.take("<I")
        r.pos += 8 * n_dims + 4 + 8
        infos.append(data[start:r.pos])
    alignment = next((v for k, t, v in kvs if k == "general.alignment"), 32)
    data_start = (r.pos + alignment - 1) // alignment * alignment
    return version, kvs, infos, alignment, data[data_start:]


def write(path, version, kvs, infos, alignment, tensor_data):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(infos), len(kvs)))
    for key, vtype, value in kvs:
        out += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    for info in infos:
        out += info
    out += b"\0" * (-len(out) % alignment)
    out += tensor_data
    with open(path, "wb") as f:
        f.write(out)


def metadata(path):
    return {k: v for k, _, v in read(path)[1]}


def with_token_renamed(src, dst, token_id, new_text):
    """Copies GGUF `src` to `dst` with token `token_id`'s text replaced: a different vocabulary."""
    version, kvs, infos, alignment, data = read(src)
    for i, (key, vtype, value) in enumerate(kvs):
        if key == "tokenizer.ggml.tokens":
            itype, tokens = value
            tokens = list(tokens)
            tokens[token_id] = new_text
            kvs[i] = (key, vtype, (itype, tokens))
    write(dst, version, kvs, infos, alignment, data)
