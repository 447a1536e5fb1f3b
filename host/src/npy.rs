//! Reading and writing NumPy `.npy` files of tensors: float32 and float64 (read as `f32`),
//! int32, int64 and bool ([`read`], [`write()`](fn@write), [`NpyData`]).
//!
//! Reference tensors (model inputs and the outputs another runtime produced for them) are
//! exchanged as `.npy` files: [`read_f32`] loads one, [`write_f32`] stores one and
//! [`file_name_for_output`] turns a graph output name into a safe file name.
//!
//! Only C-order (row-major) arrays of little-endian `float32` (`'<f4'`), `float64` (`'<f8'`,
//! converted to `f32` on reading), `int32` (`'<i4'`), `int64` (`'<i8'`), `uint8` (`'|u1'`),
//! `int8` (`'|i1'`) or `bool` (`'|b1'`)
//! are accepted ([`read_f32`] takes the two float types only); format versions 1.0, 2.0 and 3.0
//! are understood. The data is decoded and encoded by the [`npyz`] crate.
//!
//! Reading never panics on a bad file: every problem (bad magic or version, a header that is
//! not a Python literal, another dtype, Fortran order, a negative or huge shape, a truncated
//! file or bytes after the data) is an [`NpyError`] that names the file. Before `npyz` sees a
//! header, this module parses it itself with [`py_literal`] (the parser `npyz` uses) and
//! checks it, because `npyz` computes the element count and strides of a shape with
//! unchecked multiplication, which panics in debug builds on a crafted shape such as
//! `(1099511627776, 1099511627776)`.
//!
//! ```no_run
//! use std::path::Path;
//! use backplane::npy;
//!
//! let (shape, data) = npy::read_f32(Path::new("input.npy"))?;
//! let name = npy::file_name_for_output("softmax_0.tmp_0");
//! npy::write_f32(Path::new(&name), &shape, &data)?;
//! # Ok::<(), npy::NpyError>(())
//! ```
//!
//! Imports: nothing.

use std::fs::File;
use std::io::{self, BufWriter, Read};
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;
use py_literal::Value;

/// Most dimensions an array may have (NumPy's own limit is 64).
pub const MAX_DIMS: usize = 64;

/// Most elements an array may hold, on reading and on writing (16 GiB of `f32`).
///
/// On reading, a zero dimension does not lift the limit: the product of the non-zero
/// dimensions must stay within it too.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

/// Longest header text accepted, in bytes. NumPy itself refuses headers longer than
/// 10,000 bytes unless told otherwise; a header for a plain float array needs about 120.
pub const MAX_HEADER_LEN: usize = 1 << 16;

/// Deepest bracket nesting accepted in a header before parsing it (a plain array needs 2).
const MAX_HEADER_NESTING: usize = 8;

/// The six bytes every `.npy` file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Why a `.npy` file could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NpyError {
    /// The file could not be opened, read, created or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file is not a well-formed `.npy` file (magic, version or header).
    #[error("{}: not a valid .npy file: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file ends before the header or the data that the file announces.
    #[error(
        "{}: truncated .npy file: {what} needs {expected} bytes in all, the file has {actual}",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The part of the file that is cut short.
        what: &'static str,
        /// The file size that part needs.
        expected: u64,
        /// The file's actual size.
        actual: u64,
    },
    /// The file goes on after the data that its header announces.
    #[error(
        "{}: {extra} unexpected bytes after the {expected} data bytes the header announces",
        path.display()
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Data bytes announced by the header.
        expected: u64,
        /// Bytes found after them.
        extra: u64,
    },
    /// The array's dtype is not little-endian `float32` or `float64`.
    #[error(
        "{}: unsupported dtype {descr}: only little-endian float16 ('<f2'), float32 ('<f4'), float64 ('<f8'), int8 ('|i1'), int16 ('<i2'), int32 ('<i4'), int64 ('<i8'), uint8 ('|u1'), uint16 ('<u2'), uint32 ('<u4'), uint64 ('<u8') and bool ('|b1') are accepted",
        path.display()
    )]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The header's `descr` entry, as written in the file.
        descr: String,
    },
    /// The array is stored in Fortran (column-major) order.
    #[error(
        "{}: Fortran-order (column-major) arrays are not supported; save a C-order array (numpy.ascontiguousarray)",
        path.display()
    )]
    FortranOrder {
        /// The file.
        path: PathBuf,
    },
    /// The shape is negative, not made of integers, has too many dimensions or too many
    /// elements (see [`MAX_DIMS`] and [`MAX_ELEMENTS`]).
    #[error("{}: unsupported shape {shape}: {reason}", path.display())]
    BadShape {
        /// The file.
        path: PathBuf,
        /// The shape, as written in the header or passed to [`write_f32`].
        shape: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`write_f32`] was given a shape whose element count differs from the data's length.
    #[error(
        "{}: shape {shape:?} holds {expected} elements but {actual} values were given",
        path.display()
    )]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The shape passed.
        shape: Vec<u32>,
        /// Elements the shape holds.
        expected: u64,
        /// Values passed.
        actual: usize,
    },
}

impl NpyError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            NpyError::Io { path, .. }
            | NpyError::Malformed { path, .. }
            | NpyError::Truncated { path, .. }
            | NpyError::TrailingBytes { path, .. }
            | NpyError::UnsupportedDtype { path, .. }
            | NpyError::FortranOrder { path }
            | NpyError::BadShape { path, .. }
            | NpyError::ShapeMismatch { path, .. } => path,
        }
    }
}

/// Element type of an accepted file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Dtype {
    /// Every accepted dtype and its `descr`.
    const ALL: [(Dtype, &'static str); 12] = [
        (Dtype::F16, "<f2"),
        (Dtype::F32, "<f4"),
        (Dtype::F64, "<f8"),
        (Dtype::I8, "|i1"),
        (Dtype::I16, "<i2"),
        (Dtype::I32, "<i4"),
        (Dtype::I64, "<i8"),
        (Dtype::U8, "|u1"),
        (Dtype::U16, "<u2"),
        (Dtype::U32, "<u4"),
        (Dtype::U64, "<u8"),
        (Dtype::Bool, "|b1"),
    ];

    fn size(self) -> u64 {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F16 | Dtype::I16 | Dtype::U16 => 2,
            Dtype::U8 | Dtype::I8 | Dtype::Bool => 1,
        }
    }
}

/// The values of a `.npy` file, by element type.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `'<f4'`.
    F32(Vec<f32>),
    /// `'<f8'` (read into a Float32 input, each value is rounded to the nearest `f32`).
    F64(Vec<f64>),
    /// `'<f2'`, IEEE binary16, as its bits.
    F16(Vec<u16>),
    /// `'<i2'`.
    I16(Vec<i16>),
    /// `'<i4'`.
    I32(Vec<i32>),
    /// `'<i8'`.
    I64(Vec<i64>),
    /// `'|u1'` (plain UnsignedInt8, or a QAsymmU8 tensor's elements).
    U8(Vec<u8>),
    /// `'<u2'`.
    U16(Vec<u16>),
    /// `'<u4'`.
    U32(Vec<u32>),
    /// `'<u8'`.
    U64(Vec<u64>),
    /// `'|i1'` (plain Signed8, or a QAsymmS8 or QSymmS8 tensor's elements).
    I8(Vec<i8>),
    /// `'|b1'`, one byte per element (0 or 1).
    Bool(Vec<u8>),
}

impl NpyData {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::F16(v) | NpyData::U16(v) => v.len(),
            NpyData::I16(v) => v.len(),
            NpyData::I32(v) => v.len(),
            NpyData::I64(v) => v.len(),
            NpyData::U8(v) | NpyData::Bool(v) => v.len(),
            NpyData::U32(v) => v.len(),
            NpyData::U64(v) => v.len(),
            NpyData::I8(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` values as text (floats with six decimals; float16 widened to f32).
    pub fn preview(&self, n: usize) -> Vec<String> {
        fn first<T: ToString>(v: &[T], n: usize) -> Vec<String> {
            v.iter().take(n).map(ToString::to_string).collect()
        }
        match self {
            NpyData::F32(v) => v.iter().take(n).map(|x| format!("{x:.6}")).collect(),
            NpyData::F64(v) => v.iter().take(n).map(|x| format!("{x:.6}")).collect(),
            NpyData::F16(v) => v
                .iter()
                .take(n)
                .map(|&b| format!("{:.6}", half::f16::from_bits(b).to_f32()))
                .collect(),
            NpyData::I16(v) => first(v, n),
            NpyData::I32(v) => first(v, n),
            NpyData::I64(v) => first(v, n),
            NpyData::U8(v) => first(v, n),
            NpyData::U16(v) => first(v, n),
            NpyData::U32(v) => first(v, n),
            NpyData::U64(v) => first(v, n),
            NpyData::I8(v) => first(v, n),
            NpyData::Bool(v) => v.iter().take(n).map(|&b| (b != 0).to_string()).collect(),
        }
    }

    /// The dtype as NumPy writes it.
    pub fn dtype(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "float32",
            NpyData::F64(_) => "float64",
            NpyData::F16(_) => "float16",
            NpyData::I16(_) => "int16",
            NpyData::I32(_) => "int32",
            NpyData::I64(_) => "int64",
            NpyData::U8(_) => "uint8",
            NpyData::U16(_) => "uint16",
            NpyData::U32(_) => "uint32",
            NpyData::U64(_) => "uint64",
            NpyData::I8(_) => "int8",
            NpyData::Bool(_) => "bool",
        }
    }
}

/// A header that passed every check.
struct Header {
    /// Magic, version, header length and header text: everything before the data.
    bytes: Vec<u8>,
    dtype: Dtype,
    shape: Vec<u32>,
    elements: u64,
}

/// Reads a C-order `.npy` file of little-endian `f32` (`'<f4'`) or `f64` (`'<f8'`, each
/// value converted to the nearest `f32`) and returns its shape and its values in row-major
/// order. A 0-d array has an empty shape and one value.
///
/// # Errors
/// [`NpyError`] naming `path` if the file cannot be read, is not a well-formed `.npy` file,
/// has another dtype, is in Fortran order, has a negative shape or one beyond
/// [`MAX_DIMS`] / [`MAX_ELEMENTS`] (or a dimension beyond `u32::MAX`), is shorter than its
/// header announces or goes on after its data.
pub fn read_f32(path: &Path) -> Result<(Vec<u32>, Vec<f32>), NpyError> {
    let (shape, data) = read(path)?;
    only_f32(path, shape, data)
}

/// Reads a C-order `.npy` file of any accepted dtype (see [`NpyData`]) and returns its shape
/// and its values in row-major order.
///
/// # Errors
/// As [`read_f32`], except that int32, int64 and bool files are read too.
pub fn read(path: &Path) -> Result<(Vec<u32>, NpyData), NpyError> {
    let io_err = |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let file_len = file.metadata().map_err(io_err)?.len();
    read_from(path, &mut io::BufReader::new(file), file_len)
}

/// The values of a float file; any other dtype is [`NpyError::UnsupportedDtype`].
fn only_f32(path: &Path, shape: Vec<u32>, data: NpyData) -> Result<(Vec<u32>, Vec<f32>), NpyError> {
    match data {
        NpyData::F32(v) => Ok((shape, v)),
        // Rounds to the nearest f32; magnitudes beyond f32::MAX become infinite.
        NpyData::F64(v) => Ok((shape, v.into_iter().map(|x| x as f32).collect())),
        other => Err(NpyError::UnsupportedDtype {
            path: path.to_path_buf(),
            descr: format!("{} (a float array is needed here)", other.dtype()),
        }),
    }
}

/// [`read_f32`] for a `.npy` file already in memory; `path` only names it in errors.
///
/// # Errors
/// As [`read_f32`].
pub fn read_f32_bytes(path: &Path, bytes: &[u8]) -> Result<(Vec<u32>, Vec<f32>), NpyError> {
    let (shape, data) = read_from(path, &mut &bytes[..], bytes.len() as u64)?;
    only_f32(path, shape, data)
}

/// Reads a whole `.npy` file of `file_len` bytes from `reader`.
fn read_from(
    path: &Path,
    reader: &mut impl Read,
    file_len: u64,
) -> Result<(Vec<u32>, NpyData), NpyError> {
    let io_err = |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let header = read_header(path, reader, file_len)?;

    let data_len = header.elements * header.dtype.size();
    let header_len = header.bytes.len() as u64;
    let expected = header_len + data_len;
    if file_len < expected {
        return Err(NpyError::Truncated {
            path: path.to_path_buf(),
            what: "the array data",
            expected,
            actual: file_len,
        });
    }
    if file_len > expected {
        return Err(NpyError::TrailingBytes {
            path: path.to_path_buf(),
            expected: data_len,
            extra: file_len - expected,
        });
    }
    // Bounded by the file's real size, checked just above.
    let mut data = vec![0_u8; usize::try_from(data_len).map_err(|_| too_large(path))?];
    reader.read_exact(&mut data).map_err(io_err)?;

    let values = decode(path, &header, &data)?;
    Ok((header.shape, values))
}

/// Error for a data size that does not fit in memory on this platform.
fn too_large(path: &Path) -> NpyError {
    NpyError::Malformed {
        path: path.to_path_buf(),
        reason: "the array does not fit in memory on this platform".to_owned(),
    }
}

/// Decodes the data with `npyz`, after checking that it reads the header as we did.
fn decode(path: &Path, header: &Header, data: &[u8]) -> Result<NpyData, NpyError> {
    let npyz_err = |e: io::Error| NpyError::Malformed {
        path: path.to_path_buf(),
        reason: format!("npyz: {e}"),
    };
    let npy = npyz::NpyFile::new(io::Read::chain(&header.bytes[..], data)).map_err(npyz_err)?;
    let same_shape = npy.shape().len() == header.shape.len()
        && npy
            .shape()
            .iter()
            .zip(&header.shape)
            .all(|(&a, &b)| a == u64::from(b));
    if !same_shape || npy.order() != npyz::Order::C {
        return Err(NpyError::Malformed {
            path: path.to_path_buf(),
            reason: "npyz reads the header differently".to_owned(),
        });
    }
    let values = match header.dtype {
        Dtype::F32 => NpyData::F32(npy.into_vec::<f32>().map_err(npyz_err)?),
        Dtype::F64 => NpyData::F64(npy.into_vec::<f64>().map_err(npyz_err)?),
        Dtype::F16 => NpyData::F16(
            npy.into_vec::<half::f16>()
                .map_err(npyz_err)?
                .into_iter()
                .map(half::f16::to_bits)
                .collect(),
        ),
        Dtype::I16 => NpyData::I16(npy.into_vec::<i16>().map_err(npyz_err)?),
        Dtype::U16 => NpyData::U16(npy.into_vec::<u16>().map_err(npyz_err)?),
        Dtype::U32 => NpyData::U32(npy.into_vec::<u32>().map_err(npyz_err)?),
        Dtype::U64 => NpyData::U64(npy.into_vec::<u64>().map_err(npyz_err)?),
        Dtype::I32 => NpyData::I32(npy.into_vec::<i32>().map_err(npyz_err)?),
        Dtype::I64 => NpyData::I64(npy.into_vec::<i64>().map_err(npyz_err)?),
        Dtype::U8 => NpyData::U8(npy.into_vec::<u8>().map_err(npyz_err)?),
        Dtype::I8 => NpyData::I8(npy.into_vec::<i8>().map_err(npyz_err)?),
        Dtype::Bool => {
            let flags = npy.into_vec::<bool>().map_err(npyz_err)?;
            NpyData::Bool(flags.into_iter().map(u8::from).collect())
        }
    };
    if values.len() as u64 != header.elements {
        return Err(NpyError::Malformed {
            path: path.to_path_buf(),
            reason: format!(
                "npyz decoded {} values, the header announces {}",
                values.len(),
                header.elements
            ),
        });
    }
    Ok(values)
}

/// Reads `n` bytes at the reader's position (`offset` bytes into the file), or reports
/// which part (`what`) of the file is cut short.
fn read_part(
    path: &Path,
    reader: &mut impl Read,
    file_len: u64,
    offset: u64,
    n: usize,
    what: &'static str,
) -> Result<Vec<u8>, NpyError> {
    let expected = offset + n as u64;
    if file_len < expected {
        return Err(NpyError::Truncated {
            path: path.to_path_buf(),
            what,
            expected,
            actual: file_len,
        });
    }
    let mut buf = vec![0_u8; n];
    reader.read_exact(&mut buf).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(buf)
}

/// Reads and checks the magic, version and header; leaves the reader at the data.
fn read_header(path: &Path, reader: &mut impl Read, file_len: u64) -> Result<Header, NpyError> {
    let malformed = |reason: String| NpyError::Malformed {
        path: path.to_path_buf(),
        reason,
    };

    // A short file that does not even start like a .npy file is "not .npy", not "truncated".
    let magic_len = usize::try_from(file_len.min(MAGIC.len() as u64)).unwrap_or(0);
    let mut bytes = read_part(path, reader, file_len, 0, magic_len, "the magic string")?;
    if bytes[..] != MAGIC[..magic_len] {
        return Err(malformed(
            "it does not start with the magic string \\x93NUMPY".to_owned(),
        ));
    }
    if magic_len < MAGIC.len() {
        return Err(NpyError::Truncated {
            path: path.to_path_buf(),
            what: "the magic string",
            expected: MAGIC.len() as u64,
            actual: file_len,
        });
    }

    bytes.extend(read_part(
        path,
        reader,
        file_len,
        6,
        2,
        "the format version",
    )?);
    let (major, minor) = (bytes[6], bytes[7]);
    let len_size = match (major, minor) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        _ => {
            return Err(malformed(format!(
                "unsupported format version {major}.{minor}"
            )));
        }
    };
    let len_bytes = read_part(path, reader, file_len, 8, len_size, "the header length")?;
    let header_len = match len_bytes[..] {
        [a, b] => usize::from(u16::from_le_bytes([a, b])),
        [a, b, c, d] => usize::try_from(u32::from_le_bytes([a, b, c, d])).unwrap_or(usize::MAX),
        _ => unreachable!("len_size is 2 or 4"),
    };
    bytes.extend(len_bytes);
    if header_len > MAX_HEADER_LEN {
        return Err(malformed(format!(
            "the header is {header_len} bytes long, more than the {MAX_HEADER_LEN} accepted"
        )));
    }
    let text = read_part(
        path,
        reader,
        file_len,
        bytes.len() as u64,
        header_len,
        "the header",
    )?;
    let dict = parse_dict(&text).map_err(malformed)?;
    bytes.extend(text);

    let mut descr = None;
    let mut fortran_order = None;
    let mut shape = None;
    for (key, value) in dict {
        let slot = match &key {
            Value::String(k) if k == "descr" => &mut descr,
            Value::String(k) if k == "fortran_order" => &mut fortran_order,
            Value::String(k) if k == "shape" => &mut shape,
            other => return Err(malformed(format!("unexpected header key {other}"))),
        };
        if slot.replace(value).is_some() {
            return Err(malformed(format!("header key {key} appears twice")));
        }
    }
    let missing = |key: &str| malformed(format!("the header has no '{key}' entry"));
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran_order = fortran_order.ok_or_else(|| missing("fortran_order"))?;
    let shape = shape.ok_or_else(|| missing("shape"))?;

    let known = match &descr {
        Value::String(s) => Dtype::ALL.iter().find(|(_, d)| d == s).map(|(t, _)| *t),
        _ => None,
    };
    let Some(dtype) = known else {
        return Err(NpyError::UnsupportedDtype {
            path: path.to_path_buf(),
            descr: descr.to_string(),
        });
    };
    match fortran_order {
        Value::Boolean(false) => {}
        Value::Boolean(true) => {
            return Err(NpyError::FortranOrder {
                path: path.to_path_buf(),
            });
        }
        other => {
            return Err(malformed(format!(
                "'fortran_order' is {other}, not True or False"
            )));
        }
    }
    let (shape, elements) = check_read_shape(&shape).map_err(|reason| NpyError::BadShape {
        path: path.to_path_buf(),
        shape: shape.to_string(),
        reason,
    })?;
    Ok(Header {
        bytes,
        dtype,
        shape,
        elements,
    })
}

/// Parses header text into the entries of a Python dict literal.
fn parse_dict(text: &[u8]) -> Result<Vec<(Value, Value)>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "the header is not UTF-8".to_owned())?;
    // As npyz does: drop the final newline, leave the padding spaces to the parser.
    let text = text.strip_suffix('\n').unwrap_or(text);
    // The parser recurses once per bracket: refuse deep nesting before it can blow the stack.
    let mut depth = 0_usize;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_HEADER_NESTING {
                    return Err(format!(
                        "the header nests brackets more than {MAX_HEADER_NESTING} deep"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    match text.parse::<Value>() {
        Ok(Value::Dict(entries)) => Ok(entries),
        Ok(other) => Err(format!("the header is {other}, not a dict")),
        Err(e) => Err(format!("the header is not a Python literal: {e}")),
    }
}

/// Checks a header's shape; returns it and its element count.
fn check_read_shape(shape: &Value) -> Result<(Vec<u32>, u64), String> {
    let dims = match shape {
        Value::Tuple(dims) | Value::List(dims) => dims,
        _ => return Err("it is not a tuple".to_owned()),
    };
    if dims.len() > MAX_DIMS {
        return Err(format!(
            "{} dimensions, more than the {MAX_DIMS} accepted",
            dims.len()
        ));
    }
    let mut out = Vec::with_capacity(dims.len());
    for dim in dims {
        let Value::Integer(n) = dim else {
            return Err(format!("dimension {dim} is not an integer"));
        };
        let text = n.to_string();
        if text.starts_with('-') {
            return Err(format!("dimension {text} is negative"));
        }
        let d = text
            .parse::<u32>()
            .map_err(|_| format!("dimension {text} is larger than {}", u32::MAX))?;
        out.push(d);
    }
    let elements = element_count(&out)?;
    Ok((out, elements))
}

/// Element count of a shape, refusing more than [`MAX_ELEMENTS`], also counting only the
/// non-zero dimensions (so that no partial product can overflow).
fn element_count(shape: &[u32]) -> Result<u64, String> {
    let mut nonzero = 1_u64;
    for &d in shape.iter().filter(|&&d| d != 0) {
        nonzero = nonzero
            .checked_mul(u64::from(d))
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| format!("more than the {MAX_ELEMENTS} elements accepted"))?;
    }
    Ok(if shape.contains(&0) { 0 } else { nonzero })
}

/// Writes `data` as a C-order little-endian `float32` (`'<f4'`) `.npy` file of the given
/// shape, creating or truncating `path`. An empty shape writes a 0-d array (one value).
///
/// # Errors
/// [`NpyError::ShapeMismatch`] if the shape's element count is not `data.len()`,
/// [`NpyError::BadShape`] if the shape has more than [`MAX_DIMS`] dimensions or
/// [`MAX_ELEMENTS`] elements, [`NpyError::Io`] if the file cannot be created or written.
pub fn write_f32(path: &Path, shape: &[u32], data: &[f32]) -> Result<(), NpyError> {
    write_typed(path, shape, "<f4", data)
}

/// Writes `data` as a `.npy` file of its element type (`'<f4'`, `'<f8'`, `'<f2'`, `'<i2'`,
/// `'<i4'`, `'<i8'`, `'|u1'`, `'<u2'`, `'<u4'`, `'<u8'`, `'|i1'` or `'|b1'`), as
/// [`write_f32`] does for floats.
///
/// # Errors
/// As [`write_f32`].
pub fn write(path: &Path, shape: &[u32], data: &NpyData) -> Result<(), NpyError> {
    match data {
        NpyData::F32(v) => write_typed(path, shape, "<f4", v),
        NpyData::F64(v) => write_typed(path, shape, "<f8", v),
        NpyData::F16(v) => {
            let halves: Vec<half::f16> = v.iter().map(|&b| half::f16::from_bits(b)).collect();
            write_typed(path, shape, "<f2", &halves)
        }
        NpyData::I16(v) => write_typed(path, shape, "<i2", v),
        NpyData::U16(v) => write_typed(path, shape, "<u2", v),
        NpyData::U32(v) => write_typed(path, shape, "<u4", v),
        NpyData::U64(v) => write_typed(path, shape, "<u8", v),
        NpyData::I32(v) => write_typed(path, shape, "<i4", v),
        NpyData::I64(v) => write_typed(path, shape, "<i8", v),
        NpyData::U8(v) => write_typed(path, shape, "|u1", v),
        NpyData::I8(v) => write_typed(path, shape, "|i1", v),
        NpyData::Bool(v) => {
            let flags: Vec<bool> = v.iter().map(|&b| b != 0).collect();
            write_typed(path, shape, "|b1", &flags)
        }
    }
}

fn write_typed<T: npyz::Serialize + npyz::AutoSerialize + Copy>(
    path: &Path,
    shape: &[u32],
    descr: &str,
    data: &[T],
) -> Result<(), NpyError> {
    let bad_shape = |reason: String| NpyError::BadShape {
        path: path.to_path_buf(),
        shape: format!("{shape:?}"),
        reason,
    };
    if shape.len() > MAX_DIMS {
        return Err(bad_shape(format!(
            "{} dimensions, more than the {MAX_DIMS} accepted",
            shape.len()
        )));
    }
    let expected = element_count(shape).map_err(bad_shape)?;
    if expected != data.len() as u64 {
        return Err(NpyError::ShapeMismatch {
            path: path.to_path_buf(),
            shape: shape.to_vec(),
            expected,
            actual: data.len(),
        });
    }

    let io_err = |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dtype = descr
        .parse::<npyz::TypeStr>()
        .map_err(|e| io_err(io::Error::other(e.to_string())))?;
    let dims: Vec<u64> = shape.iter().map(|&d| u64::from(d)).collect();
    let file = File::create(path).map_err(io_err)?;
    let mut writer = npyz::WriteOptions::<T>::new()
        .dtype(npyz::DType::Plain(dtype))
        .shape(&dims)
        .writer(BufWriter::new(file))
        .begin_nd()
        .map_err(io_err)?;
    writer.extend(data.iter().copied()).map_err(io_err)?;
    // Checks the count and flushes the buffer, so that write errors surface here.
    writer.finish().map_err(io_err)
}

/// File name for a graph output's `.npy` file: `<name>.npy`, with every character other
/// than an ASCII letter, an ASCII digit, `.`, `_` or `-` replaced by `_`
/// (`"out/put:0"` gives `"out_put_0.npy"`).
pub fn file_name_for_output(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.push_str(".npy");
    out
}

#[cfg(test)]
#[path = "npy_tests.rs"]
mod tests;
