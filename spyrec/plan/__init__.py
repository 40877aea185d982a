"""Planning knowledge the passes share: below `spyrec/passes`, above `spyrec/ir`.

Why a layer of its own: several passes need the same answers (which core splits an op may
take, what a split costs, which buffers LX would hold, whether SuperDSC can address an op), and
`--tiling auto` must plan a candidate tiling exactly as the pipeline would. When those answers
lived in the passes, passes imported each other and ran each other as trials. Here they are
functions over the IR; each pass is a thin driver (options, one call, the report row), no pass
imports another, and nothing here imports a pass, the simulator or codegen (codegen imports
`sdsc_dims` from here). The cost parameters and formulas are `spyrec/costmodel.py`'s.

- `split_plan`: a work-division plan as a value (`Plan`: op -> `Split`) and its one writer
  into the IR (`apply_plan`): planners try plans, never the graph.
- `split_candidates`: the splits an op may take (every valid one, greedy, replicated).
- `split_estimate`: the cost model's time of one op under one split, counted on the IR.
- `hbm_bytes`: the compiler's one count of device-memory bytes (the split estimate's per
  core, tiling's and LX placement's per op and per program).
- `producers`: who writes and reads each buffer, and the slices a plan gives them (what the
  estimate asks to know whether a buffer stays in LX).
- `split_choice`: one op's split, the cheapest or nearly so on more cores (also
  split_padding's rule, `near_best`).
- `whole_plan`: a whole plan's estimated time (`whole_plan_us`, `planned_time_us`).
- `chain_moves`: re-splitting producer-consumer chains together when the estimate says so;
  `chain_steps` holds one move's steps and `move_pricing` its memoized estimates.
- `cowriters`: aligning the splits of a buffer's several writers so that it can live in LX.
- `core_splits`: work division as a function (`plan_work`, `divide_work`), the work_division
  pass's body.
- `length_shares`: how many cores run an op sized by a symbolic length at each length.
- `staging`: copying an input read alike several times into LX (`stage_inputs`), and the
  predicates the split estimate asks (`stageable_inputs`, `read_in_place`).
- `lx_placement`: which intermediates live in LX, where (`place_lx`, `apply_lx`).
- `sdsc_dims`: SuperDSC expressibility (`op_dims`, `why_not_expressible`), the emitter's test.
- `tiles`: proofs about one access inside a loop nest (the tiling passes, staging).
- `tiling/`: the tiling library (tiling files, dim names, the loop transform, symbolic-length
  tiling) that flash_attention, symbolic_lengths and coarse_tiling drive.
- `layouts`: the stick layouts a pass builds for a buffer (stick_layout, matmul_padding).
"""
