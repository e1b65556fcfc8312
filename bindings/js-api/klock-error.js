// KlockError, the one error class of the JavaScript API (bindings/js-api/kernel.d.ts): a
// kernel error with the core's stable numeric `code`, its stable upper-case `name` and the
// kernel's `message`. Both packages evaluate this same text: the Node addon inside its shape
// table (bindings/node/src/shapes.rs), the wasm package at the top of its glue
// (bindings/wasm/build.sh). It is a plain class declaration, valid in a script, a CommonJS
// module and an ES module alike.
class KlockError extends Error {
  constructor(message, code, name, options) {
    super(message, options);
    Object.defineProperty(this, 'name', { value: name, writable: true, configurable: true, enumerable: false });
    this.code = code;
  }
}
Object.defineProperty(KlockError.prototype, 'name', {
  value: 'KlockError',
  writable: true,
  configurable: true,
  enumerable: false,
});
