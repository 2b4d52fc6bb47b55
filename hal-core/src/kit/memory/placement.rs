//! What a backend whose vendor call chooses an import's address refuses
//! before importing: an import at the exporter's address, and an import
//! onto another device than the one asked.

use crate::error::{Error, Result};
use crate::types::{ImportOptions, ImportPlacement};

impl ImportOptions {
    /// Refuse these options on device `ordinal` of `backend`, whose vendor
    /// call `call` chooses the address: [`Error::Unsupported`] for
    /// [`ImportPlacement::ExporterAddress`], [`Error::InvalidArgument`] for
    /// an import onto another device (import through that device).
    pub fn refuse_unplaceable(&self, backend: &str, call: &str, ordinal: u32) -> Result<()> {
        if self.placement == ImportPlacement::ExporterAddress {
            return Err(Error::unsupported(
                backend,
                "an import at the exporter's address",
                format!(
                    "{call} chooses the address (Capabilities::FIXED_ADDRESS_IMPORT is absent)"
                ),
            ));
        }
        if let Some(d) = self.device.filter(|&d| d != ordinal) {
            return Err(Error::invalid(format!(
                "an import onto device {d} asked of device {ordinal}: import through that device"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporters_address_and_another_device_are_refused() {
        let at = ImportOptions {
            placement: ImportPlacement::ExporterAddress,
            ..ImportOptions::default()
        };
        match at.refuse_unplaceable("x", "xOpen", 0) {
            Err(e @ Error::Unsupported { .. }) => {
                assert!(e.to_string().contains("xOpen chooses the address"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        let other = ImportOptions {
            device: Some(1),
            ..ImportOptions::default()
        };
        match other.refuse_unplaceable("x", "xOpen", 0) {
            Err(e @ Error::InvalidArgument { .. }) => assert!(
                e.to_string()
                    .contains("an import onto device 1 asked of device 0"),
                "{e}"
            ),
            r => panic!("{r:?}"),
        }
        assert!(other.refuse_unplaceable("x", "xOpen", 1).is_ok());
        assert!(ImportOptions::default()
            .refuse_unplaceable("x", "xOpen", 3)
            .is_ok());
    }
}
