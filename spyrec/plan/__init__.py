"""Planning knowledge the passes share: below `spyrec/passes`, above `spyrec/ir`.

Why a layer of its own: several passes need the same answers (which core splits an op may
take, what a split costs, which buffers LX would hold, whether SuperDSC can address an op), and
`--tiling auto` must plan a candidate tiling exactly as the pipeline would. When those answers
lived in the passes, passes imported each other and ran each other as trials. Here they are
functions over the IR; each pass is a thin driver (options, one call, the report row), no pass
imports another, and nothing here imports a pass, the simulator or codegen (codegen imports
`sdsc_dims` from here). The cost parameters and formulas are `spyrec/costmodel.py`'s.

- `split_candidates`: the splits an op may take (every valid one, greedy, replicated).
- `split_estimate`: the cost model's time of one op under one split, counted on the IR.
- `chain_moves`: re-splitting producer-consumer chains together when the estimate says so.
- `core_splits`: work division as a function (`divide_work`), the work_division pass's body.
- `staging`: copying an input read alike several times into LX (`stage_inputs`), and the
  predicates the split estimate asks (`stageable_inputs`, `read_in_place`).
- `lx_placement`: which intermediates live in LX, where (`place_lx`, `apply_lx`).
- `sdsc_dims`: SuperDSC expressibility (`op_dims`, `why_not_expressible`), the emitter's test.
- `tiles`: proofs about one access inside a loop nest (coarse_tiling, staging).
- `layouts`: the stick layouts a pass builds for a buffer (stick_layout, matmul_padding).
"""
