#map_0 = affine_map<(d0)[s0] -> (s0 + 16384*d0)>
module {
  func.func @sdsc_bundle() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %loop_bound_0 = arith.constant 4 : index
    %sym_1 = arith.constant 0 : index
    %sym_2 = arith.constant 1024 : index
    %sym_3 = arith.constant 2048 : index
    %sym_4 = arith.constant 3072 : index
    %sym_5 = arith.constant 4096 : index
    %sym_6 = arith.constant 5120 : index
    %sym_7 = arith.constant 6144 : index
    %sym_8 = arith.constant 7168 : index
    %sym_9 = arith.constant 65536 : index
    %sym_10 = arith.constant 131072 : index
    %sym_11 = arith.constant 196608 : index
    %sym_12 = arith.constant 262144 : index
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    scf.for %i_0 = %c0 to %loop_bound_0 step %c1 {
      %addr_1 = affine.apply #map_0(%i_0)[%sym_1]
      %addr_2 = affine.apply #map_0(%i_0)[%sym_2]
      %addr_3 = affine.apply #map_0(%i_0)[%sym_3]
      %addr_4 = affine.apply #map_0(%i_0)[%sym_4]
      %addr_5 = affine.apply #map_0(%i_0)[%sym_5]
      %addr_6 = affine.apply #map_0(%i_0)[%sym_6]
      %addr_7 = affine.apply #map_0(%i_0)[%sym_7]
      %addr_8 = affine.apply #map_0(%i_0)[%sym_8]
      %addr_9 = affine.apply #map_0(%i_0)[%sym_9]
      %addr_10 = affine.apply #map_0(%i_0)[%sym_10]
      %addr_11 = affine.apply #map_0(%i_0)[%sym_11]
      %addr_12 = affine.apply #map_0(%i_0)[%sym_12]
      sdscbundle.sdsc_execute (%addr_1, %addr_2, %addr_3, %addr_4, %addr_5, %addr_6, %addr_7, %addr_8, %addr_9, %addr_10, %addr_11, %addr_12) {sdsc_filename = "sdsc_1.json", symbol_ids = [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12]}
    }
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_2.json"}
    func.return
  }
}
