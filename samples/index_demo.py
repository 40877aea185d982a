"""What spyrec knows so far: stick layouts and exact device coordinates.

Run with `make demo`. The compile/run commands replace this demo once they land.
"""

import sympy

from spyrec.indexing import device_coordinates, parse_expr, simplify
from spyrec.layout import default_layout


def show_access(title, host, offset, ranges, index):
    layout = default_layout(host, "float16")
    coords = device_coordinates(host, [host[1], 1], offset, layout.device_size,
                                layout.stride_map, ranges, parse_expr(index))
    print(f"{title}\n  device layout {list(layout.device_size)} / stride_map "
          f"{list(layout.stride_map)}\n  coordinates   [{', '.join(map(str, coords))}]")


def main() -> None:
    show_access("fp16 [1024,256] (seed 001)", [1024, 256], 0,
                {"c0": (0, 1023), "c1": (0, 255)}, "256*c0 + c1")
    show_access("fp16 [4,100] sliced [1:, :] (reference issue #3797: no +36 on the lane)",
                [4, 100], 100, {"c0": (0, 2), "c1": (0, 99)}, "100*c0 + c1")
    a, b = sympy.symbols("a b", integer=True)
    expr = sympy.floor((64 * a + b) / 64)
    print(f"sympy keeps {expr}; spyrec with 0 <= b < 64 gives "
          f"{simplify(expr, {a: (0, 1023), b: (0, 63)})}")
    print("(compile and run arrive with the next issue)")


if __name__ == "__main__":
    main()
