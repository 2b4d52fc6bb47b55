//! A tensor handle: a memory handle and a DLPack layout ([`TensorHandle`]).

use crate::error::{Error, HandleError, Result};
pub use crate::handle::wire::TENSOR_TEXT_PREFIX;
use crate::handle::wire::{base64_len, decode_text, Cursor, MAX_ENCODED_LEN};
use crate::handle::{Handle, HandleFlags, HandleKind};

use super::abi::DLDataType;
use super::spec::TensorSpec;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// The first four bytes of a tensor handle's binary form.
pub const TENSOR_MAGIC: [u8; 4] = [0x89, b'H', b'T', b'N'];
/// The wire version this build writes and reads.
pub const TENSOR_VERSION: u8 = 1;
/// Most dimensions a tensor handle carries.
pub const MAX_NDIM: usize = 32;
/// Length of the longest binary form.
pub const MAX_TENSOR_ENCODED_LEN: usize =
    4 + 1 + 2 + MAX_ENCODED_LEN + 4 + 8 + 1 + 1 + 16 * MAX_NDIM + 4;
/// Length of the longest text form.
pub const MAX_TENSOR_TEXT_LEN: usize =
    TENSOR_TEXT_PREFIX.len() + base64_len(MAX_TENSOR_ENCODED_LEN);

/// Strides tag: compact row-major, no strides on the wire.
const STRIDES_COMPACT: u8 = 0;
/// Strides tag: explicit strides follow the shape.
const STRIDES_EXPLICIT: u8 = 1;

/// A tensor handle: a memory handle and the DLPack layout of a tensor in
/// that memory, so that a consumer in another process gets the same dtype,
/// shape and strides as the producer without agreeing on them out of band.
///
/// # Binary form (version 1)
///
/// Integers are little-endian; fields follow each other with no padding:
///
/// | size | field | meaning |
/// | ---: | --- | --- |
/// | 4 | magic | [`TENSOR_MAGIC`], the bytes `89 48 54 4E` (`\x89HTN`) |
/// | 1 | version | [`TENSOR_VERSION`] (1) |
/// | 2 | memory length | `m`, at most [`MAX_ENCODED_LEN`](crate::handle::wire::MAX_ENCODED_LEN) |
/// | m | memory | a memory handle's binary form ([`Handle::to_bytes`]), of kind memory |
/// | 1 | dtype code | DLPack `DLDataTypeCode` (0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool, ...) |
/// | 1 | dtype bits | bits per lane, at least 1 |
/// | 2 | dtype lanes | lanes, at least 1 |
/// | 8 | byte offset | bytes from the start of the memory to the first element |
/// | 1 | ndim | `n`, at most [`MAX_NDIM`] (32) |
/// | 1 | strides tag | 0: compact row-major (no strides follow), 1: `n` strides follow |
/// | 8·n | shape | extents, `i64`, none negative |
/// | 8·n | strides | tag 1 only: strides in elements, `i64`, none negative |
/// | 4 | checksum | CRC-32 (IEEE) of every byte before it |
///
/// The decoder ([`TensorHandle::from_bytes`]) is total, like the memory
/// handle's: it checks magic and version, then the structure (every field
/// present, bounds, nothing after the checksum), then the checksum, then the
/// values: the embedded memory handle decodes and is of kind memory, the
/// data type has bits and lanes, no extent or stride is negative, and the
/// tensor fits in the memory's size without overflow.
///
/// # Text form
///
/// [`TENSOR_TEXT_PREFIX`] (`hal1t.`) and the binary form in unpadded
/// URL-safe base64. A memory handle's text starts with `hal1.`, so neither
/// decoder takes the other's text for its own: each says what it was given.
///
/// # Example
///
/// ```
/// use hal_core::dlpack::{DLDataType, TensorHandle, TensorSpec};
/// # fn demo(memory: hal_core::Handle) -> hal_core::Result<()> {
/// // A 64 x 64 float32 matrix at the start of an exported buffer.
/// let shared = TensorHandle::new(memory, &TensorSpec::new(DLDataType::F32, &[64, 64]))?;
/// let text = shared.to_text();
/// // In the consumer: the same layout, and the memory handle to import.
/// let received = TensorHandle::from_text(&text)?;
/// assert_eq!(received.shape, [64, 64]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorHandle {
    /// The memory the tensor lives in (a handle of kind memory).
    pub memory: Handle,
    /// Element type.
    pub dtype: DLDataType,
    /// Extents.
    pub shape: Vec<i64>,
    /// Strides in elements; `None` means compact row-major.
    pub strides: Option<Vec<i64>>,
    /// Bytes from the start of the memory to the first element.
    pub byte_offset: u64,
}

impl TensorHandle {
    /// The tensor `spec` describes in the memory `memory` names.
    ///
    /// `spec`'s device and read-only mark do not travel: the consumer's
    /// device comes from its import, and a tensor is read-only when the
    /// memory handle is ([`HandleFlags::READ_ONLY`]) or the consumer imports
    /// it so.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidHandle`] when `memory` is not a memory handle;
    /// [`Error::InvalidArgument`] when the layout is not one a tensor handle
    /// carries (more than [`MAX_NDIM`] dimensions, no bits or lanes,
    /// negative extents or strides, strides of the wrong count) or does not
    /// fit in the memory's size.
    pub fn new(memory: Handle, spec: &TensorSpec) -> Result<TensorHandle> {
        if memory.kind != HandleKind::Memory {
            return Err(HandleError::WrongKind {
                expected: HandleKind::Memory.name(),
                found: memory.kind.name(),
            }
            .into());
        }
        if spec.shape.len() > MAX_NDIM {
            return Err(Error::invalid(format!(
                "{} dimensions: a tensor handle carries at most {MAX_NDIM}",
                spec.shape.len()
            )));
        }
        spec.layout(memory.size)?;
        Ok(TensorHandle {
            memory,
            dtype: spec.dtype,
            shape: spec.shape.clone(),
            strides: spec.strides.clone(),
            byte_offset: spec.byte_offset,
        })
    }

    /// The layout as a [`TensorSpec`] for
    /// [`DlpackTensor::new`](super::DlpackTensor::new): no device (the
    /// importer's default), read-only when the memory handle is.
    pub fn spec(&self) -> TensorSpec {
        TensorSpec {
            dtype: self.dtype,
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            byte_offset: self.byte_offset,
            device: None,
            read_only: self.memory.flags.contains(HandleFlags::READ_ONLY),
        }
    }

    /// The binary form (see [`TensorHandle`]). A tensor
    /// handle built by hand with more than [`MAX_NDIM`] dimensions or an
    /// unencodable memory handle writes what the decoder refuses; one from
    /// [`TensorHandle::new`] or a decoder always round-trips.
    pub fn to_bytes(&self) -> Vec<u8> {
        let memory = self.memory.to_bytes();
        let ndim = self.shape.len();
        let mut out = Vec::with_capacity(4 + 1 + 2 + memory.len() + 16 + 16 * ndim + 4);
        out.extend_from_slice(&TENSOR_MAGIC);
        out.push(TENSOR_VERSION);
        out.extend_from_slice(
            &u16::try_from(memory.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        out.extend_from_slice(&memory);
        out.push(self.dtype.code);
        out.push(self.dtype.bits);
        out.extend_from_slice(&self.dtype.lanes.to_le_bytes());
        out.extend_from_slice(&self.byte_offset.to_le_bytes());
        out.push(u8::try_from(ndim).unwrap_or(u8::MAX));
        out.push(match self.strides {
            None => STRIDES_COMPACT,
            Some(_) => STRIDES_EXPLICIT,
        });
        for d in &self.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        for s in self.strides.iter().flatten() {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The text form: [`TENSOR_TEXT_PREFIX`] and the binary form in
    /// URL-safe base64.
    pub fn to_text(&self) -> String {
        let bytes = self.to_bytes();
        let mut text = String::with_capacity(TENSOR_TEXT_PREFIX.len() + base64_len(bytes.len()));
        text.push_str(TENSOR_TEXT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&bytes, &mut text);
        text
    }

    /// Decode the text form, ignoring ASCII whitespace around it. A memory
    /// handle's text (`hal1.`) is refused as [`HandleError::WrongKind`].
    ///
    /// A text longer than [`MAX_TENSOR_TEXT_LEN`] is refused as
    /// [`HandleError::OverBound`] (field `text`) before any base64 is
    /// decoded. That bound is the prefix and the base64 of
    /// [`MAX_TENSOR_ENCODED_LEN`] bytes, and base64 grows with every byte,
    /// so the text of a binary form is within it exactly when the binary
    /// form is within its own: the text of bytes that
    /// [`from_bytes`](Self::from_bytes) refuses as over
    /// [`MAX_TENSOR_ENCODED_LEN`] (field `tensor handle`) is refused as over
    /// [`MAX_TENSOR_TEXT_LEN`], and the text of any other bytes decodes
    /// exactly as the bytes do.
    pub fn from_text(text: &str) -> std::result::Result<TensorHandle, HandleError> {
        if text
            .trim_start()
            .starts_with(crate::handle::wire::TEXT_PREFIX)
        {
            return Err(HandleError::WrongKind {
                expected: "tensor",
                found: "memory, event or notify",
            });
        }
        decode_text(
            text,
            TENSOR_TEXT_PREFIX,
            MAX_TENSOR_TEXT_LEN,
            TensorHandle::from_bytes,
        )
    }

    /// Decode the binary form. Total: every input decodes or names its
    /// problem (see [`TensorHandle`] for the order).
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<TensorHandle, HandleError> {
        let raw = parse(bytes)?;
        raw.check()
    }
}

/// The fields as read, before their values are checked.
struct Raw<'a> {
    memory: &'a [u8],
    dtype: DLDataType,
    byte_offset: u64,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
}

/// Magic, version and structure, then the checksum.
fn parse(bytes: &[u8]) -> std::result::Result<Raw<'_>, HandleError> {
    if bytes.len() > MAX_TENSOR_ENCODED_LEN {
        return Err(HandleError::OverBound {
            field: "tensor handle",
            len: bytes.len(),
            max: MAX_TENSOR_ENCODED_LEN,
        });
    }
    let magic_len = bytes.len().min(TENSOR_MAGIC.len());
    if bytes[..magic_len] != TENSOR_MAGIC[..magic_len] {
        return Err(HandleError::BadMagic);
    }
    let mut c = Cursor::new(bytes);
    c.take(TENSOR_MAGIC.len(), "magic")?;
    let version = c.u8("version")?;
    if version != TENSOR_VERSION {
        return Err(HandleError::UnsupportedVersion {
            found: version,
            supported: TENSOR_VERSION,
        });
    }
    let memory_len = usize::from(c.u16("memory length")?);
    if memory_len > MAX_ENCODED_LEN {
        return Err(HandleError::OverBound {
            field: "memory handle",
            len: memory_len,
            max: MAX_ENCODED_LEN,
        });
    }
    let memory = c.take(memory_len, "memory handle")?;
    let code = c.u8("dtype code")?;
    let bits = c.u8("dtype bits")?;
    let lanes = c.u16("dtype lanes")?;
    let byte_offset = c.u64("byte offset")?;
    let ndim = usize::from(c.u8("ndim")?);
    if ndim > MAX_NDIM {
        return Err(HandleError::OverBound {
            field: "ndim",
            len: ndim,
            max: MAX_NDIM,
        });
    }
    let tag = c.u8("strides tag")?;
    if tag != STRIDES_COMPACT && tag != STRIDES_EXPLICIT {
        return Err(HandleError::Malformed {
            field: "strides tag",
            detail: format!("{tag} is neither 0 (compact) nor 1 (explicit)"),
        });
    }
    let mut read_i64s = |field: &'static str| -> std::result::Result<Vec<i64>, HandleError> {
        (0..ndim).map(|_| c.u64(field).map(|v| v as i64)).collect()
    };
    let shape = read_i64s("shape")?;
    let strides = if tag == STRIDES_EXPLICIT {
        Some(read_i64s("strides")?)
    } else {
        None
    };
    let body_len = bytes.len() - c.remaining();
    let stored = c.u32("checksum")?;
    if c.remaining() != 0 {
        return Err(HandleError::TrailingBytes(c.remaining()));
    }
    let computed = crc32fast::hash(&bytes[..body_len]);
    if stored != computed {
        return Err(HandleError::BadChecksum { stored, computed });
    }
    Ok(Raw {
        memory,
        dtype: DLDataType::new(code, bits, lanes),
        byte_offset,
        shape,
        strides,
    })
}

impl Raw<'_> {
    /// The values: the memory handle, the data type, the layout.
    fn check(self) -> std::result::Result<TensorHandle, HandleError> {
        let memory = Handle::from_bytes(self.memory)?;
        let spec = TensorSpec {
            dtype: self.dtype,
            shape: self.shape,
            strides: self.strides,
            byte_offset: self.byte_offset,
            device: None,
            read_only: false,
        };
        TensorHandle::new(memory, &spec).map_err(|e| match e {
            Error::InvalidHandle(h) => h,
            other => HandleError::Malformed {
                field: "layout",
                detail: other.to_string(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::wire::TEXT_PREFIX;
    use crate::handle::{FdSource, PidKind};
    use crate::types::{BackendId, Location};

    fn handle(kind: HandleKind, size: u64) -> Handle {
        Handle {
            kind,
            backend: BackendId::CpuShm,
            device: 0,
            device_uuid: [3; 16],
            location: Location::Host,
            size,
            offset: 0,
            address: 0,
            creator_pid: 4242,
            creator_start: 1234,
            creator_pid_ns: 4026531836,
            object_id: [7; 16],
            flags: HandleFlags::ANY_IMPORTER,
            pid_kind: PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::Broker {
                count: 1,
                name: "hal-broker-4242".into(),
            },
            payload: b"payload".to_vec(),
        }
    }

    fn memory(size: u64) -> Handle {
        handle(HandleKind::Memory, size)
    }

    fn sample() -> TensorHandle {
        TensorHandle::new(
            memory(4096),
            &TensorSpec::new(DLDataType::F32, &[4, 8])
                .with_strides(&[16, 2])
                .with_byte_offset(64),
        )
        .unwrap()
    }

    #[test]
    fn round_trips_in_bytes_and_text() {
        for th in [
            sample(),
            TensorHandle::new(memory(16), &TensorSpec::new(DLDataType::U8, &[16])).unwrap(),
            TensorHandle::new(memory(0), &TensorSpec::new(DLDataType::BF16, &[0, 3])).unwrap(),
            TensorHandle::new(memory(8), &TensorSpec::new(DLDataType::F64, &[])).unwrap(),
        ] {
            assert_eq!(TensorHandle::from_bytes(&th.to_bytes()).unwrap(), th);
            let text = th.to_text();
            assert!(text.starts_with(TENSOR_TEXT_PREFIX), "{text}");
            assert_eq!(TensorHandle::from_text(&format!(" {text}\n")).unwrap(), th);
        }
    }

    #[test]
    fn the_spec_keeps_the_layout_and_the_read_only_mark() {
        let mut th = sample();
        let spec = th.spec();
        assert_eq!(spec.dtype, DLDataType::F32);
        assert_eq!(spec.shape, [4, 8]);
        assert_eq!(spec.strides.as_deref(), Some(&[16, 2][..]));
        assert_eq!(spec.byte_offset, 64);
        assert!(!spec.read_only);
        th.memory.flags.insert(HandleFlags::READ_ONLY);
        assert!(th.spec().read_only);
    }

    #[test]
    fn a_layout_past_the_memory_is_refused() {
        // 4 x 8 f32 with strides (16, 2) from byte 64: the last element
        // is at index 3*16 + 7*2 = 62, so it needs 64 + 63*4 = 316 bytes.
        let spec = TensorSpec::new(DLDataType::F32, &[4, 8])
            .with_strides(&[16, 2])
            .with_byte_offset(64);
        assert!(TensorHandle::new(memory(316), &spec).is_ok());
        let e = TensorHandle::new(memory(315), &spec).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        let huge = TensorSpec::new(DLDataType::F64, &[i64::MAX, 4]);
        assert!(TensorHandle::new(memory(u64::MAX), &huge).is_err());
        let deep = TensorSpec::new(DLDataType::U8, &[1; MAX_NDIM + 1]);
        let e = TensorHandle::new(memory(1), &deep).unwrap_err();
        assert!(e.to_string().contains("at most 32"), "{e}");
    }

    #[test]
    fn only_a_memory_handle_carries_a_tensor() {
        let notify = handle(HandleKind::Notify, 0);
        let e = TensorHandle::new(notify, &TensorSpec::new(DLDataType::U8, &[])).unwrap_err();
        assert!(
            matches!(e, Error::InvalidHandle(HandleError::WrongKind { .. })),
            "{e}"
        );
    }

    #[test]
    fn a_text_cut_short_is_truncated_wherever_it_is_cut() {
        let text = sample().to_text();
        for len in TENSOR_TEXT_PREFIX.len() + 1..text.len() {
            match TensorHandle::from_text(&text[..len]) {
                Err(e @ HandleError::Truncated { .. }) => {
                    assert!(e.to_string().starts_with("truncated"), "{e}")
                }
                other => panic!("text cut at {len}: {other:?}"),
            }
        }
    }

    #[test]
    fn each_text_is_refused_by_the_other_decoder_with_what_it_is() {
        let th = sample();
        let mem_text = th.memory.to_text();
        assert!(mem_text.starts_with(TEXT_PREFIX));
        let e = TensorHandle::from_text(&mem_text).unwrap_err();
        assert!(matches!(e, HandleError::WrongKind { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "expected a tensor handle, got a memory, event or notify handle"
        );
        let e = Handle::from_text(&th.to_text()).unwrap_err();
        assert!(matches!(e, HandleError::WrongKind { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "expected a memory, event or notify handle, got a tensor handle"
        );
    }

    /// Rewrite the checksum so that a changed field reaches the value checks.
    fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
        let body = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn the_decoder_names_each_problem() {
        let good = sample().to_bytes();
        let mem_len = sample().memory.to_bytes().len();
        let after_mem = 7 + mem_len;
        let ndim_at = after_mem + 4 + 8;

        assert_eq!(
            TensorHandle::from_bytes(b"nope"),
            Err(HandleError::BadMagic)
        );
        assert!(matches!(
            TensorHandle::from_bytes(&good[..2]),
            Err(HandleError::Truncated { field: "magic", .. })
        ));
        let mut v = good.clone();
        v[4] = 2;
        assert_eq!(
            TensorHandle::from_bytes(&v),
            Err(HandleError::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        );
        for cut in 5..good.len() {
            assert!(
                matches!(
                    TensorHandle::from_bytes(&good[..cut]),
                    Err(HandleError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            TensorHandle::from_bytes(&long),
            Err(HandleError::TrailingBytes(1))
        );
        let mut flipped = good.clone();
        flipped[ndim_at - 1] ^= 1;
        assert!(matches!(
            TensorHandle::from_bytes(&flipped),
            Err(HandleError::BadChecksum { .. })
        ));
        let mut deep = good.clone();
        deep[ndim_at] = 33;
        assert!(matches!(
            TensorHandle::from_bytes(&deep),
            Err(HandleError::OverBound {
                field: "ndim",
                len: 33,
                max: 32
            })
        ));
        let mut tag = good.clone();
        tag[ndim_at + 1] = 2;
        assert!(matches!(
            TensorHandle::from_bytes(&resealed(tag)),
            Err(HandleError::Malformed {
                field: "strides tag",
                ..
            })
        ));
        let mut negative = good.clone();
        negative[ndim_at + 2..ndim_at + 10].copy_from_slice(&(-1i64).to_le_bytes());
        assert!(matches!(
            TensorHandle::from_bytes(&resealed(negative)),
            Err(HandleError::Malformed {
                field: "layout",
                ..
            })
        ));
        let mut no_bits = good.clone();
        no_bits[after_mem + 1] = 0;
        assert!(matches!(
            TensorHandle::from_bytes(&resealed(no_bits)),
            Err(HandleError::Malformed {
                field: "layout",
                ..
            })
        ));
        let mut far = good.clone();
        far[after_mem + 4..after_mem + 12].copy_from_slice(&4000u64.to_le_bytes());
        assert!(matches!(
            TensorHandle::from_bytes(&resealed(far)),
            Err(HandleError::Malformed {
                field: "layout",
                ..
            })
        ));
        // The embedded memory handle is decoded with its own decoder.
        let mut damaged = good.clone();
        damaged[7] ^= 0xff;
        assert_eq!(
            TensorHandle::from_bytes(&resealed(damaged)),
            Err(HandleError::BadMagic)
        );
    }

    /// The longest tensor handle: a memory handle of every variable field
    /// at its bound, and [`MAX_NDIM`] dimensions with strides.
    fn longest() -> TensorHandle {
        use crate::handle::wire::{MAX_PAYLOAD, MAX_PIDS, MAX_SOCKET_NAME};
        let mut memory = memory(u64::MAX);
        memory.flags = HandleFlags(0);
        memory.allowed_pids = (1..=MAX_PIDS as u32).collect();
        memory.fds = FdSource::Broker {
            count: 1,
            name: "b".repeat(MAX_SOCKET_NAME),
        };
        memory.payload = vec![0xEE; MAX_PAYLOAD];
        let spec = TensorSpec::new(DLDataType::F32, &[1; MAX_NDIM]).with_strides(&[1; MAX_NDIM]);
        TensorHandle::new(memory, &spec).unwrap()
    }

    #[test]
    fn the_text_bound_is_the_byte_bound() {
        // Bytes are within their bound exactly when their text is within
        // its own, for every length around the bound.
        for n in 0..MAX_TENSOR_ENCODED_LEN + 16 {
            let text = TENSOR_TEXT_PREFIX.len() + base64_len(n);
            assert_eq!(
                text <= MAX_TENSOR_TEXT_LEN,
                n <= MAX_TENSOR_ENCODED_LEN,
                "{n} bytes, {text} characters"
            );
        }
        // At the bound both decoders take the longest handle; one byte
        // over, both refuse it, each naming its own bound.
        let th = longest();
        let bytes = th.to_bytes();
        assert_eq!(bytes.len(), MAX_TENSOR_ENCODED_LEN);
        let text = th.to_text();
        assert_eq!(text.len(), MAX_TENSOR_TEXT_LEN);
        assert_eq!(TensorHandle::from_bytes(&bytes).as_ref(), Ok(&th));
        assert_eq!(TensorHandle::from_text(&text).as_ref(), Ok(&th));
        let over = [&bytes[..], &[0]].concat();
        let over_text = format!("{TENSOR_TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(&over));
        assert_eq!(
            TensorHandle::from_bytes(&over),
            Err(HandleError::OverBound {
                field: "tensor handle",
                len: MAX_TENSOR_ENCODED_LEN + 1,
                max: MAX_TENSOR_ENCODED_LEN
            })
        );
        assert_eq!(
            TensorHandle::from_text(&over_text),
            Err(HandleError::OverBound {
                field: "text",
                len: MAX_TENSOR_TEXT_LEN + 1,
                max: MAX_TENSOR_TEXT_LEN
            })
        );
        // The input the fuzz target first failed on: 1,269 bytes, whose
        // text of 1,698 characters is over the text's bound.
        let mut long = bytes.clone();
        long.resize(1269, 20);
        let long_text = format!("{TENSOR_TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(&long));
        assert!(matches!(
            TensorHandle::from_bytes(&long),
            Err(HandleError::OverBound { len: 1269, .. })
        ));
        assert!(matches!(
            TensorHandle::from_text(&long_text),
            Err(HandleError::OverBound { len: 1698, .. })
        ));
    }

    #[test]
    fn the_decoder_is_total_on_arbitrary_bytes() {
        // Every prefix and every single-byte change of a good encoding, and
        // a deterministic spray of random inputs, decode or fail: never panic.
        let good = sample().to_bytes();
        for i in 0..good.len() {
            for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut v = good.clone();
                v[i] = b;
                let _ = TensorHandle::from_bytes(&v);
                let _ = TensorHandle::from_bytes(&resealed(v));
            }
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2048 {
            let v: Vec<u8> = (0..len % 900)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let _ = TensorHandle::from_bytes(&v);
        }
        assert!(TensorHandle::from_bytes(&vec![0; MAX_TENSOR_ENCODED_LEN + 1]).is_err());
    }
}
