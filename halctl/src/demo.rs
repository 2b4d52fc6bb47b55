//! `halctl demo`: share a buffer between two real processes and measure what
//! sharing costs against the raw system calls, in the same run.
//!
//! The exporter (this process) allocates a buffer, fills it with a
//! pseudo-random pattern and exports it. It starts the consumer (this same
//! binary, hidden subcommand `__demo-consumer`), which connects to a control
//! socket and receives the handle texts, nothing else: the descriptors come
//! from the exporter's descriptor broker. The consumer imports the buffer,
//! checks every byte and the checksum, measures its read bandwidth, and both
//! sides ping-pong a notify. Each side waits only on the notify it created and
//! signals the one the other exported, which works on backends where only the
//! creator may wait.
//!
//! Baselines, measured in the same run between the same two processes:
//! - import: a sealed memfd of the same size received over a Unix socket
//!   (connect, `SCM_RIGHTS`), `fstat`, `mmap` and the first touch;
//! - notify round trip: a blocking futex ping-pong on a shared memfd (the
//!   notify waits block too, with no spin phase, so both sides do the same);
//! - read bandwidth: a private buffer of the same size in the consumer, read
//!   the same way.
//!
//! Ratios are hal / baseline: above 1 means slower for times, below 1 means
//! slower for bandwidth.

mod consumer;
mod exporter;
mod protocol;
mod report;

pub use consumer::consumer;
pub use exporter::run;
pub use protocol::{ConsumerArgs, DemoArgs};
