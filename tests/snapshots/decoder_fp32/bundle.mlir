module {
  func.func @sdsc_bundle() {
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_1.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_2.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_3.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_4.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_5.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_6.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_7.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_8.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_9.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_10.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_11.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_12.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_13.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_14.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_15.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_16.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_17.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_18.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_19.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_20.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_21.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_22.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_23.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_24.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_25.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_26.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_27.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_28.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_29.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_30.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_31.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_32.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_33.json"}
    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_34.json"}
    func.return
  }
}
