"""Minimal GGUF v2/v3 reader: metadata as a dict, tensors as numpy arrays (memory-mapped).

Independent of gguf_writer's code paths on purpose, so the round-trip test checks the format and
not one function against itself.
"""
import struct

import numpy as np

_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_GGML_DTYPE = {0: np.float32, 1: np.float16, 27: np.int64}


class GGUFFile:
    def __init__(self, path):
        self.path = str(path)
        self.buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        self.pos = 0
        magic = bytes(self.buf[:4])
        if magic != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (magic {magic!r})")
        self.pos = 4
        self.version = self._read("<I")
        n_tensors, n_kv = self._read("<Q"), self._read("<Q")
        self.metadata = {}
        self.types = {}
        self.array_types = {}  # key -> element type of an array value (to write it back as it was)
        for _ in range(n_kv):
            key = self._read_str()
            vtype = self._read("<I")
            self.types[key] = vtype
            if vtype == _ARRAY:
                (self.array_types[key],) = struct.unpack("<I", bytes(self.buf[self.pos:self.pos + 4]))
            self.metadata[key] = self._read_value(vtype)
        self.alignment = int(self.metadata.get("general.alignment", 32))
        infos = []
        for _ in range(n_tensors):
            name = self._read_str()
            n_dims = self._read("<I")
            ne = [self._read("<Q") for _ in range(n_dims)]
            gtype, offset = self._read("<I"), self._read("<Q")
            infos.append((name, ne, gtype, offset))
        self.data_start = (self.pos + self.alignment - 1) // self.alignment * self.alignment
        self.tensor_info = {}
        self.tensors = {}
        for name, ne, gtype, offset in infos:
            if gtype not in _GGML_DTYPE:
                raise ValueError(f"tensor {name}: ggml type {gtype} not supported by this reader")
            dt = np.dtype(_GGML_DTYPE[gtype])
            n = int(np.prod(ne)) if ne else 1
            start = self.data_start + offset
            if offset % self.alignment:
                raise ValueError(f"tensor {name}: offset {offset} not aligned to {self.alignment}")
            arr = self.buf[start:start + n * dt.itemsize].view(dt).reshape(tuple(reversed(ne)))
            self.tensor_info[name] = (ne, gtype, offset)
            self.tensors[name] = arr

    def _read(self, fmt):
        size = struct.calcsize(fmt)
        (v,) = struct.unpack(fmt, bytes(self.buf[self.pos:self.pos + size]))
        self.pos += size
        return v

    def _read_str(self):
        n = self._read("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def _read_value(self, vtype):
        if vtype == _STRING:
            return self._read_str()
        if vtype == _ARRAY:
            elem, n = self._read("<I"), self._read("<Q")
            if elem == _STRING:
                return [self._read_str() for _ in range(n)]
            if elem == _ARRAY:
                return [self._read_value(_ARRAY) for _ in range(n)]
            dt = np.dtype(_FMT[elem])
            arr = np.frombuffer(bytes(self.buf[self.pos:self.pos + n * dt.itemsize]), dtype=dt)
            self.pos += n * dt.itemsize
            return arr.tolist()
        return self._read(_FMT[vtype])


def read(path) -> GGUFFile:
    return GGUFFile(path)
