//! Sets the linker flags a Node addon needs (napi-rs).
fn main() {
    napi_build::setup();
}
