//! A backend's own table of error codes: what [`kit::vendor`](super)
//! holds for CUDA and ACL, for a vendor whose crate lives outside hal's
//! workspace. The codes are the vendor's (from its public headers), kept as
//! plain data in the backend's crate; the table turns a vendor status into
//! the [`Error::Vendor`] hal reports, keeping the number and its name.
//!
//! ```
//! use hal_core::kit::vendor::Code;
//! use hal_core::kit::vendor::table::CodeTable;
//! use hal_core::BackendId;
//!
//! const CODES: CodeTable = CodeTable {
//!     vendor: "EXAMPLE",
//!     codes: &[Code::new(0, "EXAMPLE_SUCCESS"), Code::new(7, "EXAMPLE_NO_MEMORY")],
//! };
//! assert_eq!(CODES.name(7), Some("EXAMPLE_NO_MEMORY"));
//! let backend = BackendId::External(0x8001);
//! assert!(CODES.check(backend, 0, "alloc").is_ok());
//! let e = CODES.check(backend, 7, "alloc").unwrap_err();
//! assert!(CODES.codes[1].matches(&e));
//! let unknown = CODES.check(backend, 99, "alloc").unwrap_err();
//! assert!(unknown.to_string().contains("EXAMPLE_UNKNOWN_99"), "{unknown}");
//! ```

use super::codes::Code;
use crate::error::{Error, Result, VendorError};
use crate::types::BackendId;

/// A vendor's error codes, the one whose number is 0 meaning success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeTable {
    /// The vendor's prefix for an unknown code's name (`EXAMPLE` gives
    /// `EXAMPLE_UNKNOWN_99`).
    pub vendor: &'static str,
    /// Every code the vendor's header defines.
    pub codes: &'static [Code],
}

impl CodeTable {
    /// The code numbered `number`, if the table has it.
    pub fn code(&self, number: i64) -> Option<Code> {
        self.codes.iter().copied().find(|c| c.code == number)
    }

    /// The name of the code numbered `number`, if the table has it.
    pub fn name(&self, number: i64) -> Option<&'static str> {
        self.code(number).map(|c| c.name)
    }

    /// `Ok` for status 0; otherwise the [`Error::Vendor`] of `backend` with
    /// the number, its name (`VENDOR_UNKNOWN_N` for a number the table
    /// lacks) and a message saying which call (`what`) answered it.
    pub fn check(&self, backend: BackendId, status: i64, what: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        let name = self.name(status).map_or_else(
            || format!("{}_UNKNOWN_{status}", self.vendor),
            str::to_string,
        );
        Err(Error::Vendor(VendorError {
            backend,
            code: status,
            name,
            message: format!("{what} failed"),
        }))
    }
}
