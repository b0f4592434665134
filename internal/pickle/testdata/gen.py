"""Writes the pickle decoder's corpus: Python's own pickler output for
values covering the opcodes of protocols 2 to 5, each beside the canonical
rendering the Go test expects (see render in pickle_test.go).

Run from this folder with any Python 3.8+: python3 gen.py
"""
import dataclasses
import pickle
import struct


class Plain:
    def __init__(self, a, b):
        self.a, self.b = a, b


@dataclasses.dataclass(frozen=True)
class Key:
    fqn: str
    index: int = None


@dataclasses.dataclass
class Slotted:
    __slots__ = ("x", "y")
    x: int
    y: str


class Reduced:
    def __init__(self, *args):
        self.args = args

    def __reduce__(self):
        return (Reduced, self.args)


def render(v):
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "f" + str(struct.unpack("<Q", struct.pack("<d", v))[0])
    if isinstance(v, str):
        return "s" + v.encode().hex()
    if isinstance(v, bytes):
        return "b" + v.hex()
    if isinstance(v, tuple):
        return "(" + ",".join(map(render, v)) + ")"
    if isinstance(v, list):
        return "[" + ",".join(map(render, v)) + "]"
    if isinstance(v, (set, frozenset)):
        return "{" + ",".join(map(render, v)) + "}"
    if isinstance(v, dict):
        return "{" + ",".join(render(k) + ":" + render(x) for k, x in v.items()) + "}"
    cls = "obj(__main__." + type(v).__name__
    if isinstance(v, Reduced):
        return cls + "," + render(v.args) + ")"
    if isinstance(v, Slotted):
        return cls + ",())" + render((None, {"x": v.x, "y": v.y}))
    return cls + ",())" + render(vars(v))


shared = [1, 2]
values = {
    "ints": [0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**64, 2**100, -(2**70)],
    "floats": (0.0, -1.5, 1e300, 0.1),
    "strings": ["", "step-100", "é☃", "x" * 300, b"", b"\x00\xff", b"y" * 300],
    "consts": (None, True, False, (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)),
    "sets": [set(), {1, 2, 3}, frozenset({"a"})],
    "shared": [shared, shared, {"k": shared}],
    "objects": [Plain(1, "a"), Key("model.w", 3), Slotted(4, "z"), Reduced(7, "r")],
    "dict_keys": {Key("a"): 1, Key("b", 2): [3], 4: "four"},
    "big_list": list(range(1200)),
    "big_dict": {str(i): i for i in range(1100)},
}

if __name__ == "__main__":
    # Protocols 2 and 3 write sets (and 2 bytes) as calls of builtins: only
    # the other values are compared there. DCP writes protocol 4 (Python's
    # default since 3.8; 5 from 3.14).
    old = ("ints", "floats", "consts", "shared", "objects", "dict_keys", "big_list")
    for proto in (2, 3, 4, 5):
        for name, v in values.items():
            if proto < 4 and name not in old:
                continue
            with open(f"p{proto}_{name}.pkl", "wb") as f:
                pickle.dump(v, f, protocol=proto)
            with open(f"p{proto}_{name}.want", "w") as f:
                f.write(render(v) + "\n")
