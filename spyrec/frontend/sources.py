"""Where a node came from, as users want to read it: their file's line and their module path.

An FX node's `stack_trace` lists frames outermost first; the innermost ones are usually inside
torch (`torch/nn/modules/linear.py:134 in forward` for every `nn.Linear`), which tells a user
nothing. The source line is the innermost frame *outside torch*: the line of the model that
called into torch (`models.py:37 in forward`). A model library such as transformers counts as
the model: its frames are where the model is written, and the user's own script is not on the
exported stack at all. `nn_module_stack` adds the module path of the innermost module
(`fc1`, `layers.0.mlp`), so `models.py:37 in forward [fc1]` says which of several calls on one
line it is. Both front ends keep both fields verbatim, so both give the same text.
"""

from __future__ import annotations

import re

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# A file of torch itself: an installed torch (site-packages/torch/...) or a source checkout's
# torch/<package>/ (torch/nn, torch/_refs, torch/fx, ...). Generated code (`<eval_with_key>`)
# has no file a user could open.
_TORCH_FILE = re.compile(r"(?:^|/)(?:site|dist)-packages/torch/|/torch/(?:nn|fx|export|utils|"
                         r"autograd|_\w+)/|/torch/\w+\.py$")


def source_of(node) -> str | None:
    """`file.py:LINE in func [module.path]` of the model code that produced `node`."""
    line = _source_line(node.meta.get("stack_trace"))
    module = module_path(node)
    if line is None:
        return f"[{module}]" if module else None
    return f"{line} [{module}]" if module else line


def source_for_message(node) -> str:
    """`source_of(node)`, or "unknown source line" when the node has none: the place an
    error message names."""
    return source_of(node) or "unknown source line"


def module_path(node) -> str:
    """The path of the innermost module `node` ran in (`fc1`, `layers.0.mlp`); '' at the top."""
    stack = node.meta.get("nn_module_stack")
    if not isinstance(stack, dict) or not stack:
        return ""
    path = list(stack.values())[-1]
    return path[0] if isinstance(path, (tuple, list)) and isinstance(path[0], str) else ""


def _source_line(trace) -> str | None:
    if not isinstance(trace, str):
        return None
    frames = [f for f in _FRAME.findall(trace.replace("\\", "/")) if not f[0].startswith("<")]
    if not frames:
        return None
    outside = [f for f in frames if not _TORCH_FILE.search(f[0])]
    file, line, func = (outside or frames)[-1]
    return f"{file.rsplit('/', 1)[-1]}:{line} in {func}"
