//! VMM: physical allocations (`physical.rs`), address reservations and
//! their mappings (`reservation.rs`), and the device's VMM operations,
//! sharing by descriptor included (`ops.rs`).

pub(crate) mod ops;
pub(crate) mod physical;
pub(crate) mod reservation;

pub use physical::CudaPhysical;
pub use reservation::CudaReservation;
