//! The backend's own error codes, kept as a vendor's would be: plain data
//! in the backend's crate (numbers and names from the vendor's public
//! header), turned into [`hal_core::Error::Vendor`] by the kit's
//! [`CodeTable`]. The template's "vendor" is the operating system, so its
//! one use is the answer to an allocation past [`MAX_ALLOCATION`].

use hal_core::kit::vendor::table::CodeTable;
use hal_core::kit::vendor::Code;

/// No error.
pub const SUCCESS: Code = Code::new(0, "TEMPLATE_SUCCESS");
/// An allocation larger than the backend gives.
pub const TOO_LARGE: Code = Code::new(1, "TEMPLATE_ERROR_TOO_LARGE");

/// Every code of the backend.
pub const CODES: CodeTable = CodeTable {
    vendor: "TEMPLATE",
    codes: &[SUCCESS, TOO_LARGE],
};

/// The largest allocation the template makes (1 TiB of address space).
pub const MAX_ALLOCATION: u64 = 1 << 40;

/// The status of an allocation of `size` bytes, as a vendor call would
/// answer it.
pub(crate) fn allocation_status(size: u64) -> i64 {
    if size > MAX_ALLOCATION {
        TOO_LARGE.code
    } else {
        SUCCESS.code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_becomes_a_vendor_error_with_its_name() {
        assert!(CODES
            .check(crate::id::BACKEND_ID, allocation_status(4096), "allocate")
            .is_ok());
        let e = CODES
            .check(
                crate::id::BACKEND_ID,
                allocation_status(MAX_ALLOCATION + 1),
                "allocate",
            )
            .unwrap_err();
        assert!(TOO_LARGE.matches(&e), "{e:?}");
        assert!(e.to_string().contains("TEMPLATE_ERROR_TOO_LARGE"), "{e}");
    }
}
