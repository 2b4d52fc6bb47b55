//! The vendor-neutral halves of VMM, which both driver backends share:
//!
//! - [`pieces`]: the mapped pieces of a reservation;
//! - [`checks`]: the checks of a VMM call's arguments;
//! - [`physical`]: what is known of a physical allocation, and
//!   [`Physical`](crate::Physical) answered from it;
//! - [`forward`]: [`Vmm`](crate::Vmm) implemented once over a device's own
//!   calls;
//! - [`copies`]: [`Reservation`](crate::Reservation) implemented once over
//!   a reservation's vendor copies;
//! - [`none`]: the `Vmm` of a device without VMM, every operation answering
//!   `Unsupported`.

pub mod checks;
pub mod copies;
pub mod forward;
pub mod none;
pub mod physical;
pub mod pieces;
