#map_0 = affine_map<(d0)[s0] -> (s0 + 16384*d0)>
module {
  func.func @sdsc_bundle() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %loop_bound_0 = arith.constant 4 : index
    %sym_1 = arith.constant 0 : index
    %sym_2 = arith.constant 65536 : index
    %sym_3 = arith.constant 196608 : index
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    scf.for %i_0 = %c0 to %loop_bound_0 step %c1 {
      %addr_1 = affine.apply #map_0(%i_0)[%sym_1]
      %addr_2 = affine.apply #map_0(%i_0)[%sym_2]
      %addr_3 = affine.apply #map_0(%i_0)[%sym_3]
      sdscbundle.sdsc_execute (%addr_1, %addr_2, %addr_3) {sdsc_filename = "sdsc_1.json", symbol_ids = [-1, -2, -3]}
      sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_2.json"}
    }
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_3.json"}
    func.return
  }
}
