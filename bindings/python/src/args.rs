//! Argument conversion: Python values to the kernel's Rust types.
//!
//! Contract: a conversion either yields exactly the value the caller meant or raises, before
//! the kernel is touched (so bad input never changes state):
//! - integers (times, ids, TTLs) must be `int` (not `bool`, not `float`, not `None`):
//!   `TypeError` otherwise; negative is `ValueError`; above 2**64-1 is `OverflowError`;
//! - strings must be `str`: `TypeError` otherwise; a `str` that is not valid Unicode text
//!   (lone surrogates) is a `ValueError`;
//! - sequences (intents, lease ids) must be lists, tuples or other iterables, never a bare
//!   `str` or `bytes` (which would silently iterate characters): `TypeError`;
//! - flags must be `bool`: `TypeError` otherwise.
//!
//! Messages name the argument and say what was expected.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| String::from("?"))
}

/// `repr(obj)` for messages, cut to a readable length (never fails).
fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    let full = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    match full.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &full[..cut]),
        None => full,
    }
}

/// A `str` that cannot be UTF-8 (lone surrogates, e.g. from `os.fsdecode` of bad bytes).
fn not_unicode(py: Python<'_>, what: &str, cause: PyErr) -> PyErr {
    let err = PyValueError::new_err(format!(
        "{what} must be valid Unicode text (no lone surrogates): {cause}"
    ));
    err.set_cause(py, Some(cause));
    err
}

/// An unsigned 64-bit integer argument.
pub fn u64_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_exact_instance_of::<PyInt>()
        || (obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>())
    {
        if let Ok(value) = obj.extract::<u64>() {
            return Ok(value);
        }
        let repr = short_repr(obj);
        return Err(if obj.lt(0)? {
            PyValueError::new_err(format!("{what} must be >= 0, got {repr}"))
        } else {
            PyOverflowError::new_err(format!("{what} must be at most 2**64-1, got {repr}"))
        });
    }
    let repr = short_repr(obj);
    Err(PyTypeError::new_err(format!(
        "{what} must be an int, got {} {repr}",
        type_name(obj)
    )))
}

/// An optional unsigned 64-bit integer argument (`None` = the kernel's default).
pub fn opt_u64_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u64>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => u64_arg(o, what).map(Some),
    }
}

/// A `str` argument, borrowed as UTF-8.
pub fn str_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a str> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str().map_err(|e| not_unicode(obj.py(), what, e)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a str, got {}",
            type_name(obj)
        ))),
    }
}

/// Visits every item of a list-like argument (any iterable but `str`, `bytes` and `dict`).
fn for_each_item<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    expected: &str,
    mut visit: impl FnMut(usize, Bound<'py, PyAny>) -> PyResult<()>,
) -> PyResult<()> {
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyDict>()
    {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a list of {expected}, got {}",
            type_name(obj)
        )));
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a list of {expected}, got {}",
            type_name(obj)
        ))
    })?;
    for (index, item) in iter.enumerate() {
        visit(index, item?)?;
    }
    Ok(())
}

/// A list of `str`, kept alive as Python strings so they can be borrowed as `&str`.
pub fn str_list<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyString>>> {
    let mut out = Vec::new();
    for_each_item(obj, what, "str", |index, item| {
        match item.cast_into::<PyString>() {
            Ok(s) => {
                // Reject lone surrogates now, before anything else happens.
                s.to_str()
                    .map_err(|e| not_unicode(s.py(), &format!("{what}[{index}]"), e))?;
                out.push(s);
            }
            Err(e) => {
                let got = type_name(e.into_inner().as_any());
                return Err(PyTypeError::new_err(format!(
                    "{what}[{index}] must be a str, got {got}"
                )));
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Borrows the strings of [`str_list`] (already checked to be valid UTF-8).
pub fn borrow_strs<'a>(list: &'a [Bound<'_, PyString>]) -> PyResult<Vec<&'a str>> {
    list.iter().map(|s| s.to_str()).collect()
}

/// A list of unsigned 64-bit integers (ids).
pub fn u64_list(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let mut out = Vec::new();
    for_each_item(obj, what, "int", |index, item| {
        out.push(u64_arg(&item, &format!("{what}[{index}]"))?);
        Ok(())
    })?;
    Ok(out)
}

/// A flag that must be a real `bool` (`0`, `1`, `None` and other truthy values are refused).
pub struct StrictBool(pub bool);

impl<'a, 'py> FromPyObject<'a, 'py> for StrictBool {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<StrictBool> {
        match obj.cast_exact::<PyBool>() {
            Ok(b) => Ok(StrictBool(b.is_true())),
            Err(_) => Err(PyTypeError::new_err(format!(
                "wait must be a bool, got {}",
                type_name(&obj)
            ))),
        }
    }
}
