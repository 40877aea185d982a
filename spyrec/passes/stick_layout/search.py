"""The layout search behind the `stick_layout` pass: beam search over per-op layout choices.

A state holds the layout chosen for every buffer decided so far, the restickified copies made
so far (shared by later consumers at no extra cost), the per-input decisions, and its cost in
device element slots moved. Ops are visited in program order; each state branches over the
op's candidate output layouts (A-layout §4.3); for each candidate every operand is read
directly when stick-compatible, else through an existing copy, else through a new restickified
copy (cost: the source's device slots; none for a constant, which gets the layout at compile
time), else through a copy of just the accessed view. States with the same layouts and copies
for every buffer still to be read are merged; the cheapest `beam_width` survive, ties broken by
(cost, copies made), then first-found (candidate order), so the result is deterministic.

Cost per op is independent of the program's length (issue 26: 800-3,000-op programs), so the
search is linear in the op count:
- a state keeps in `layouts` only the buffers some later op still touches; a buffer's layout
  moves, after its last access, into `retired`, a chain of dicts shared by every state that
  descends from the one that retired it; decisions are such a chain too. Branching a state
  therefore copies what is live (a few buffers per layer), not every layout so far;
- merging compares states on the live buffers some state has a layout for (every state has
  none for the others, so leaving them out merges exactly the same states), and on the
  copies of buffers still to be read, kept per state as they are made and retired;
- candidate layouts, host coordinates and view copies are memoized on shapes, index and
  iteration space, not names: every state of the beam asks the same, and so does every layer
  of a stack (`tests/passes/test_compile_scaling.py` counts the work at two depths).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spyrec.errors import UnsupportedProgram
from spyrec.indexing import Var
from spyrec.indexing.coordinates import host_coordinates
from spyrec.indexing.simplify import simplify_lin
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.layout.device_layout import DeviceLayout, default_layout
from spyrec.indexing.sticks import compatible, stick_info
from spyrec.plan.layouts import layout_with_stick

COPY_OPS = ("identity", "ReStickifyOpHBM")


def is_laid_out_at_compile_time(graph: Graph, name: str) -> bool:
    """A constant with a value: the compiler writes it in any layout (DESIGN §3), as many
    layouts as its readers want, so re-laying it out runs nothing on the device."""
    return graph.buffers[name].role == "constant" and name in graph.constants


@dataclass(frozen=True)
class Decision:
    """How one operand is read: through a restickified `copy` or a materialized `view`."""

    kind: str
    layout: DeviceLayout | None = None
    order: tuple[str, ...] = ()


@dataclass
class State:
    cost: int = 0                 # device element slots moved by restickifies
    inserted: int = 0             # copies the pass adds (ties: fewer ops win)
    # layouts of the buffers a later op still touches; the others are in `retired`
    layouts: dict[str, DeviceLayout] = field(default_factory=dict)
    # source buffer -> the layouts of its copies, in the order they were made (shared
    # between branches: replaced, never changed in place)
    copies: dict = field(default_factory=dict)
    # the copies whose source a later op still reads (what merging compares)
    live_copies: frozenset = frozenset()
    # (parent, {buffer: layout}) chains, shared with the states this one branched from
    retired: tuple | None = None
    decisions: tuple | None = None    # (parent, op index, {operand: Decision})

    def branch(self) -> "State":
        return State(self.cost, self.inserted, dict(self.layouts), self.copies,
                     self.live_copies, self.retired, self.decisions)

    def all_layouts(self) -> dict[str, DeviceLayout]:
        """Every layout chosen: the retired ones and the live ones."""
        out: dict[str, DeviceLayout] = {}
        node = self.retired
        while node is not None:
            node, part = node
            out.update(part)
        out.update(self.layouts)
        return out

    def all_decisions(self) -> dict[int, dict[int, Decision]]:
        """op index -> {operand index: Decision}, for the ops that read through a copy."""
        out: dict[int, dict[int, Decision]] = {}
        node = self.decisions
        while node is not None:
            node, i, part = node
            out[i] = part
        return out


class LayoutSearch:
    def __init__(self, graph: Graph, pins: dict[str, DeviceLayout], free_inputs: bool,
                 beam_width: int) -> None:
        self.graph = graph
        self.beam_width = beam_width
        self.free = {n for n, b in graph.buffers.items() if b.role == "constant"}
        self.constant_values = {n for n in self.free if is_laid_out_at_compile_time(graph, n)}
        self.free |= {op.output.buffer for op in graph.ops if op.op == "fill"}
        # one object per distinct layout in every state (`_canonical`)
        self._canon: dict[DeviceLayout, DeviceLayout] = {}
        start = State()
        for name in graph.inputs:
            if name in pins:
                start.layouts[name] = self._canonical(pins[name])
            elif free_inputs:
                self.free.add(name)
            else:
                buf = graph.buffers[name]
                start.layouts[name] = self._canonical(default_layout(buf.host_size,
                                                                     buf.host_dtype))
        self.last_read = _last_reads(graph)
        last_access = _last_accesses(graph)
        # buffers whose last access / last read is op i: retired from every state after it
        self.dies: dict[int, list[str]] = {}
        self.last_read_at: dict[int, list[str]] = {}
        for name, last in last_access.items():
            self.dies.setdefault(last, []).append(name)
        for name, last in self.last_read.items():
            self.last_read_at.setdefault(last, []).append(name)
        never = {n: layout for n, layout in start.layouts.items() if n not in last_access}
        start.layouts = {n: layout for n, layout in start.layouts.items() if n in last_access}
        start.retired = (None, never) if never else None
        self.start = start
        # buffers some state may have a layout for and a later op reads (merge keys)
        self.touched: dict[str, None] = dict.fromkeys(start.layouts)
        self._memo: dict[tuple, object] = {}
        self._fit_memo: dict[tuple, tuple] = {}     # `_fits`
        self._plans: dict[tuple, list] = {}         # `_expand`, for the current op
        self._names: dict[int, tuple] = {}           # `_expand_key`
        self._made: list | None = None               # copies `_plan` records
        # layouts copied into branches and compared when merging: the search's work, which
        # tests/passes/test_compile_scaling.py checks grows linearly with a stack's depth
        self.work = 0

    # --- the search --------------------------------------------------------------------------
    def run(self) -> State:
        beam = [self.start]
        for i, op in enumerate(self.graph.ops):
            self.touched.update(dict.fromkeys(a.buffer for _, a in op.accesses()))
            expanded: list[State] = []
            self._plans.clear()
            for state in beam:
                expanded.extend(self._expand(i, op, state))
            if not expanded:
                raise self._infeasible(op, beam[0])
            if i in self.last_read_at:
                for state in expanded:
                    self._forget_copies(i, state)
            beam = self._prune(i, expanded) if len(expanded) > 1 else expanded
            for state in beam:
                self._retire(i, state)
            for name in self.dies.get(i, ()):
                self.touched.pop(name, None)
        best = beam[0]
        # callers read every layout and decision as plain dicts
        return State(best.cost, best.inserted, best.all_layouts(), best.copies,
                     best.live_copies, None, best.all_decisions())

    def _retire(self, i: int, s: State) -> None:
        """Move the layouts of the buffers op i touched last into `s.retired` (no later op
        asks for them; the commit does)."""
        dead = {}
        for name in self.dies.get(i, ()):
            if name in s.layouts:
                dead[name] = s.layouts.pop(name)
        if dead:
            s.retired = (s.retired, dead)

    def _forget_copies(self, i: int, s: State) -> None:
        """Drop from `s.live_copies` the copies of buffers op i read last: merging after op i
        no longer tells states apart by them."""
        if s.live_copies:
            gone = set(self.last_read_at[i])
            if any(c[0] in gone for c in s.live_copies):
                s.live_copies = frozenset(c for c in s.live_copies if c[0] not in gone)

    def _prune(self, i: int, states: list[State]) -> list[State]:
        # the buffers still to be read that any state has a layout for, in a fixed order;
        # every state has none for the rest (no op has touched them yet)
        live = [n for n in self.touched if self.last_read.get(n, -1) > i]
        self.work += len(live) * len(states)
        best: dict[tuple, State] = {}
        for s in sorted(states, key=lambda s: (s.cost, s.inserted)):  # stable: first found wins
            get = s.layouts.get       # layouts are canonical: equal exactly when identical
            key = (tuple([id(get(n)) for n in live]), s.live_copies)
            if key not in best:
                best[key] = s
        return list(best.values())[: self.beam_width]

    def _expand(self, i: int, op: Operation, state: State) -> list[State]:
        """The states op i's candidates make of `state`. The states of a beam mostly agree
        on what op i reads (they differ elsewhere), so what one candidate does to a state
        is worked out once per distinct `_expand_key` and replayed (`_plan`, `_replay`)."""
        if op.op == "fill":
            return [state]
        key = self._expand_key(op, state)
        plans = self._plans.get(key)
        if plans is None:
            plans = self._plans[key] = self._plan(i, op, state)
        out = []
        for plan in plans:
            s = state.branch()
            self.work += len(s.layouts)
            if plan is not None:
                self._replay(i, s, plan)
                out.append(s)
        return out

    def _expand_key(self, op: Operation, state: State) -> tuple:
        """All `_expand` reads of a state: the layouts of op's buffers and their copies (in
        the state's own order: the first fitting copy is used)."""
        names = self._names.get(id(op))
        if names is None or names[0] is not op:
            names = self._names[id(op)] = (op, tuple(dict.fromkeys(
                a.buffer for _, a in op.accesses())))
        get = state.layouts.get      # canonical layouts: compared by identity
        copies = state.copies
        return (tuple([id(get(n)) for n in names[1]]),
                tuple([copies.get(n, ()) for n in names[1]]))

    def _plan(self, i: int, op: Operation, state: State) -> list:
        """Per candidate output layout, None (infeasible) or what it does to a state: the
        layouts it adds (in order), the copies it makes (in order), the cost and inserted
        ops it adds, and its decisions."""
        plans = []
        for candidate in self._output_candidates(op, state):
            s = state.branch()
            s.layouts.setdefault(op.output.buffer, candidate)
            self._made = []
            if not self._place_inputs(i, op, s):
                plans.append(None)
                continue
            added = [(n, self._canonical(lay)) for n, lay in s.layouts.items()
                     if n not in state.layouts]
            decisions = s.decisions[2] if s.decisions is not state.decisions else None
            plans.append((added, self._made, s.cost - state.cost,
                          s.inserted - state.inserted, decisions))
        self._made = None
        return plans

    def _replay(self, i: int, s: State, plan: tuple) -> None:
        """Do to `s` what `_plan` recorded, in the same order (so dicts and sets iterate as
        if the candidate had been placed on `s` itself)."""
        added, made, cost, inserted, decisions = plan
        for name, layout in added:
            s.layouts[name] = layout
        for copy in made:
            self._add_copy(i, s, copy)
        s.cost += cost
        s.inserted += inserted
        if decisions is not None:
            s.decisions = (s.decisions, i, dict(decisions))

    def _canonical(self, layout: DeviceLayout) -> DeviceLayout:
        """The one object of `layout`'s value that states hold: merging and `_expand_key`
        then compare layouts by identity, not by a dataclass hash per buffer per state."""
        return self._canon.setdefault(layout, layout)

    def _add_copy(self, i: int, s: State, copy: tuple) -> None:
        name, layout = copy
        made = s.copies.get(name, ())
        if layout not in made:
            s.copies = {**s.copies, name: made + (layout,)}
        if self.last_read.get(copy[0], -1) > i:
            s.live_copies = s.live_copies | {copy}
        if self._made is not None:
            self._made.append(copy)

    # --- candidates ----------------------------------------------------------------------------
    def _output_candidates(self, op: Operation, s: State) -> list[DeviceLayout]:
        out = self.graph.buffers[op.output.buffer]
        if op.output.buffer in s.layouts:
            return [s.layouts[op.output.buffer]]
        if op.op == "batchmatmul":
            return [default_layout(out.host_size, out.host_dtype)]
        sticks = tuple(self._stick_var(op, a, s) for a in op.inputs)
        key = ("out", out.host_size, out.host_strides, out.host_dtype, op.output.index,
               op.ranges, op.var_ranges, op.reduced, sticks)
        if key not in self._memo:
            self._memo[key] = self._output_layouts(op, out, sticks)
        return self._memo[key]

    def _output_layouts(self, op: Operation, out: Buffer, sticks: tuple) -> list[DeviceLayout]:
        """The candidates for an output not laid out yet, given its inputs' stick vars."""
        e = default_layout(out.host_size, out.host_dtype).elems_per_stick
        host = _host_coords(out, op.output.index, op)
        dims: list[int | None] = []
        if op.is_reduction and any(v in op.reduced for v in sticks if v):
            dims.append(None)  # reduction along the stick: a stick-sparse output
        for v in sorted({v for v in sticks if v and v not in op.reduced}, key=_var_order):
            dims += [d for d, c in enumerate(host) if Var(v) in c.free_atoms()]
        last = len(out.host_size) - 1
        dims.append(last)
        dims += [d for d, n in enumerate(out.host_size) if d != last and n > 1 and n % e == 0]
        if out.host_size and not any(sticks):
            dims.append(None)  # no operand has a stick var: a sparse output is legal
        allowed = [d for d in dict.fromkeys(dims)
                   if d is None or d == last or out.host_size[d] % e == 0]
        if not out.host_size:
            return [default_layout(out.host_size, out.host_dtype)]
        return [layout_with_stick(out, d) for d in allowed]

    def _stick_var(self, op: Operation, access: Access, s: State) -> str | None:
        layout = s.layouts.get(access.buffer)
        if layout is None:
            return None
        buf = self.graph.buffers[access.buffer]
        return stick_info(buf.host_size, buf.host_strides, layout, op.var_ranges,
                          access.index).stick_var

    # --- operands ----------------------------------------------------------------------------
    def _place_inputs(self, i: int, op: Operation, s: State) -> bool:
        for a in op.index_inputs:
            self._decide_free(a, s, None, op, any_layout=True)
        out = self.graph.buffers[op.output.buffer]
        out_info = stick_info(out.host_size, out.host_strides, s.layouts[op.output.buffer],
                              op.var_ranges, op.output.index)
        if op.op in COPY_OPS and not op.index_inputs:
            # A copy the program makes anyway can change the stick for free (A §4.3 AnyIn).
            self._decide_free(op.inputs[0], s, out_info.stick_var, op)
            return True
        decisions: dict[int, Decision] = {}
        for k, access in enumerate(op.inputs):
            target = op.reduced[0] if op.op == "batchmatmul" and k == 0 else out_info.stick_var
            decision = self._place_operand(i, op, access, target, s)
            if decision is False:
                return False
            if decision is not None:
                decisions[k] = decision
        if decisions:
            s.decisions = (s.decisions, i, decisions)
        return True

    def _fits(self, op: Operation, access: Access, layout: DeviceLayout, target) -> bool:
        """Can op read `access` laid out as `layout` with stick var `target`? Memoized by
        object identity (the search asks ~100 times per op; hashing the layout and the
        stick_info key each time cost more than the answer); the entry holds the objects,
        so an id is never reused while its entry lives."""
        key = (id(op), id(access), id(layout), target)
        got = self._fit_memo.get(key)
        if got is None:
            buf = self.graph.buffers[access.buffer]
            info = stick_info(buf.host_size, buf.host_strides, layout, op.var_ranges,
                              access.index)
            got = self._fit_memo[key] = (op, access, layout, compatible(
                info, target, op.reduced, layout.elems_per_stick))
        return got[3]

    def _decide_free(self, access: Access, s: State, target, op: Operation,
                     any_layout: bool = False) -> None:
        """A free buffer's first consumer picks its layout (compile-time layout, no cost)."""
        if access.buffer in s.layouts:
            return
        buf = self.graph.buffers[access.buffer]
        if access.buffer in self.free and not any_layout:
            for layout in self._candidates(buf, access, target, op):
                if self._fits(op, access, layout, target):
                    s.layouts[access.buffer] = layout
                    return
        s.layouts[access.buffer] = default_layout(buf.host_size, buf.host_dtype)

    def _place_operand(self, i: int, op: Operation, access: Access, target, s: State):
        """None: read directly; a Decision: read through a copy; False: impossible."""
        self._decide_free(access, s, target, op)
        if self._fits(op, access, s.layouts[access.buffer], target):
            return None
        for layout in s.copies.get(access.buffer, ()):   # the first made that fits
            if self._fits(op, access, layout, target):
                return Decision("copy", layout)
        source = s.layouts[access.buffer]
        # A copy of the accessed view (an identity op, which reads any layout element by
        # element: the compact op of A-layout §7) always works, sparse sources included.
        view = self._view_copy(op, access, target)
        # a constant gets a second layout at compile time: no device op, no slots moved
        constant = access.buffer in self.constant_values
        if constant or not source.is_sparse:  # a restickify cannot gather sparse sticks
            buf = self.graph.buffers[access.buffer]
            for layout in self._candidates(buf, access, target, op):
                if layout != source and self._fits(op, access, layout, target):
                    if not constant and view is not None and view[1] < source.device_elems:
                        break     # the view is smaller than the tensor (k of a fused qkv)
                    self._add_copy(i, s, (access.buffer, layout))
                    s.cost += 0 if constant else source.device_elems
                    s.inserted += 1
                    return Decision("copy", layout)
        if view is not None:  # from a sparse source it reads every (mostly padding) stick
            s.cost += max(view[1], source.device_elems) if source.is_sparse else view[1]
            s.inserted += 1
            return Decision("view", order=view[0])
        return False

    def _candidates(self, buf: Buffer, access: Access, target, op: Operation):
        key = ("candidates", buf.host_size, buf.host_strides, buf.host_dtype, access.index,
               target, op.var_ranges, op.reduced)
        if key not in self._memo:
            self._memo[key] = self._candidate_layouts(buf, access, target, op)
        return self._memo[key]

    def _candidate_layouts(self, buf: Buffer, access: Access, target, op: Operation):
        """Layouts to try for `buf`: stick on the dim carrying `target`, sparse, the rest.
        With no target (the op's output has no stick var: a reduction along the stick, or
        to a scalar) the dims carrying a reduced var come first, innermost first: lanes full
        of reduced elements, where sparse would give each element its own stick (32-64x the
        bytes)."""
        host = _host_coords(buf, access.index, op)
        if target is None:
            carrying = [d for d, c in reversed(list(enumerate(host)))
                        if buf.host_size[d] > 1 and any(Var(r) in c.free_atoms()
                                                        for r in op.reduced)]
        else:
            carrying = [d for d, c in enumerate(host) if Var(target) in c.free_atoms()]
        rest = [d for d, n in enumerate(buf.host_size) if d not in carrying and n > 1]
        layouts = [layout_with_stick(buf, d) for d in carrying]
        if buf.host_size:
            layouts.append(layout_with_stick(buf, None))
        layouts += [layout_with_stick(buf, d) for d in rest]
        if not buf.host_size:
            layouts.append(default_layout(buf.host_size, buf.host_dtype))
        return layouts

    def _view_copy(self, op: Operation, access: Access, target):
        src = self.graph.buffers[access.buffer]
        key = ("view", src.host_dtype, access.index, target, op.ranges, op.var_ranges,
               op.reduced)
        if key not in self._memo:
            self._memo[key] = self._view_copy_of(op, access, target)
        return self._memo[key]

    def _view_copy_of(self, op: Operation, access: Access, target):
        """A fresh buffer over the vars the access uses, target last: (var order, elements).
        None for a gathered access: the copy would lose the op's index tensors (and the vars
        only they read), so a restickify of the whole tensor is used instead."""
        if any(not isinstance(a, Var) for a in access.index.free_atoms()):
            return None
        used = {a.name for a in access.index.free_atoms() if isinstance(a, Var)}
        order = [v for v, _ in op.ranges if v in used and v != target]
        if target in used:
            order.append(target)
        sizes = dict(op.ranges)
        src = self.graph.buffers[access.buffer]
        buf = Buffer("view", tuple(sizes[v] for v in order), src.host_dtype, "intermediate")
        layout = default_layout(buf.host_size, buf.host_dtype)
        from spyrec.indexing import Lin, var

        index = sum((var(v).scale(st) for v, st, n in zip(order, buf.host_strides,
                                                            buf.host_size) if n > 1), Lin())
        info = stick_info(buf.host_size, buf.host_strides, layout, op.var_ranges, index)
        if not compatible(info, target, op.reduced, layout.elems_per_stick):
            return None
        return tuple(order), layout.device_elems

    # --- failure -----------------------------------------------------------------------------
    def _infeasible(self, op: Operation, s: State) -> UnsupportedProgram:
        out = self.graph.buffers[op.output.buffer]
        blocking = []
        for access in op.inputs:
            layout = s.layouts.get(access.buffer)
            buf = self.graph.buffers[access.buffer]
            if layout is None:
                continue
            info = stick_info(buf.host_size, buf.host_strides, layout, op.var_ranges,
                              access.index)
            coords = ", ".join(str(c) for c in info.coords)
            kind = "stick-sparse" if layout.is_sparse else "laid out"
            blocking.append(f"{buf.name} {list(buf.host_size)} ({kind}, device coordinates "
                            f"[{coords}])")
        return UnsupportedProgram(
            f"no device layout works for op {op.name} ({op.op}) at "
            f"{op.source or 'unknown source line'}, output {out.name} "
            f"{list(out.host_size)}: input {'; '.join(blocking)} is read across the op's "
            f"stick, and there is no mechanism to gather elements from multiple sticks into a "
            f"single stick (a stick-sparse tensor cannot be restickified). Keep the reduced dim "
            f"(keepdim=True) or reduce along a non-stick dim.")


def _host_coords(buf: Buffer, index, op: Operation):
    return [simplify_lin(c, op.var_ranges)
            for c in host_coordinates(buf.host_size, buf.host_strides, index)]


def _var_order(name: str) -> tuple:
    return (name[0] != "c", int(name[1:]) if name[1:].isdigit() else 0, name)


def _last_accesses(graph: Graph) -> dict[str, int]:
    """Buffer -> index of the last op that reads or writes it."""
    last: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for _, a in op.accesses():
            last[a.buffer] = i
    return last


def _last_reads(graph: Graph) -> dict[str, int]:
    last: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for role, a in op.accesses():
            if role != "output":
                last[a.buffer] = i
    return last
