// ---- appended by bindings/wasm/build.sh (source: bindings/wasm/freed-guard.js) --------------
// A call on a freed Kernel: wasm-bindgen's glue hands the freed (zeroed) pointer to Rust, whose
// only answer is "null pointer passed to rust". Every method and getter of the class checks
// first and throws a clear Error instead, with `code` 'ERR_INVALID_STATE' (the code Node uses
// for an object in the wrong state), before anything reaches the wasm module. `free()` on a
// freed kernel is a no-op, like closing something already closed. The glue's own code is left
// as wasm-bindgen wrote it; this only wraps `Kernel.prototype` once, when the module loads.
/* global Kernel -- the class of the wasm-bindgen glue this file is appended to */
{
  const freedError = () => {
    const error = new Error(
      'this Kernel was freed (free() was called): create a new one, or call clone() before free()',
    );
    error.code = 'ERR_INVALID_STATE';
    return error;
  };
  const proto = Kernel.prototype;
  const originalFree = proto.free;
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === 'constructor' || name === '__destroy_into_raw') continue;
    const d = Object.getOwnPropertyDescriptor(proto, name);
    if (name === 'free') {
      d.value = {
        free() {
          if (this.__wbg_ptr !== 0) originalFree.call(this);
        },
      }.free;
    } else if (typeof d.value === 'function') {
      const method = d.value;
      d.value = {
        [name](...args) {
          if (this.__wbg_ptr === 0) throw freedError();
          return method.apply(this, args);
        },
      }[name];
      Object.defineProperty(d.value, 'length', { value: method.length });
    } else if (typeof d.get === 'function') {
      const get = d.get;
      d.get = function () {
        if (this.__wbg_ptr === 0) throw freedError();
        return get.call(this);
      };
    } else {
      continue;
    }
    Object.defineProperty(proto, name, d);
  }
  if (typeof Symbol.dispose === 'symbol' && proto[Symbol.dispose] === originalFree) proto[Symbol.dispose] = proto.free;
}
