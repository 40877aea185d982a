"""The tiling library: what the three passes that add counted loops share.

flash_attention, symbolic_lengths and coarse_tiling (`spyrec/passes/`) each drive part of it:
- `spec`: the tiling file's shape (`--tiling FILE.yaml`: dims, groups, attention entries);
- `dimnames`: which op variable walks a named dim (and `dim_vars`, per output dim);
- `config` and `checks`: a config resolved into a `TilingPlan` the program can take;
- `transform`: the loop transform itself (`tile_graph`, `unroll`), its per-access proofs in
  `plan/tiles.py`;
- `symbolic`: ops over a symbolic length, sized or tiled, and the proofs the front end asks
  of a program's lengths;
- `subgraphs`: a copy of part of the program for a trial, which `plan/trials.py` plans with
  the pipeline's configured options.
"""
