//! `halctl channel ls`: this user's channels (`hal::channel`), their
//! publishers, subscribers and slots in use. A subscriber that forwards
//! the samples to a subscriber on another host (`hal::remote`, the process
//! that offers the channel) is listed with that host's address, as the
//! offering process recorded it (`hal::channel::RemoteNote`).

use clap::Subcommand;
use hal::channel::{self, ChannelInfo, Mode};
use serde::Serialize;

use crate::fail::{CmdResult, Context};
use crate::out;

/// `halctl channel ...`.
#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// List this user's channels: publisher (and whether it is open), mode,
    /// slots in use, samples published, subscribers (those that serve a
    /// subscriber on another host with its address).
    Ls {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Serialize)]
struct ChannelOut {
    name: String,
    publisher_pid: u32,
    open: bool,
    mode: &'static str,
    slots: usize,
    slot_size: u64,
    slots_in_use: usize,
    published: u64,
    subscribers: Vec<u32>,
    /// The subscribers that forward to a subscriber on another host.
    remote_subscribers: Vec<RemoteOut>,
}

#[derive(Debug, Serialize)]
struct RemoteOut {
    /// The local subscriber's pid (the offering process).
    pid: u32,
    /// The remote subscriber's address, `IP:PORT`.
    host: String,
}

#[derive(Debug, Serialize)]
struct LsOut {
    channels: Vec<ChannelOut>,
}

fn channel_out(c: &ChannelInfo) -> ChannelOut {
    ChannelOut {
        name: c.name.clone(),
        publisher_pid: c.publisher,
        open: c.open,
        mode: match c.mode {
            Mode::Broadcast => "broadcast",
            Mode::Queue => "queue",
        },
        slots: c.slots,
        slot_size: c.slot_size,
        slots_in_use: c.slots_in_use,
        published: c.published,
        subscribers: c.subscribers.clone(),
        remote_subscribers: c
            .remote_subscribers
            .iter()
            .map(|r| RemoteOut {
                pid: r.pid,
                host: r.host.clone(),
            })
            .collect(),
    }
}

/// Run `halctl channel ...`.
pub fn run(cmd: &ChannelCommand) -> CmdResult {
    match cmd {
        ChannelCommand::Ls { json } => {
            let list: Vec<ChannelOut> = channel::list()
                .ctx("listing the channels")?
                .iter()
                .map(channel_out)
                .collect();
            if *json {
                return out::json(&LsOut { channels: list });
            }
            if list.is_empty() {
                return out::line("no channels of this user");
            }
            for c in &list {
                // A pid serves as many remote subscribers as it has entries
                // among them; the others are local.
                let mut remotes: Vec<&RemoteOut> = c.remote_subscribers.iter().collect();
                let subs: Vec<String> = c
                    .subscribers
                    .iter()
                    .map(|pid| match remotes.iter().position(|r| r.pid == *pid) {
                        Some(i) => format!("{pid} (remote {})", remotes.remove(i).host),
                        None => pid.to_string(),
                    })
                    .collect();
                out::line(format!(
                    "{}: publisher pid {} ({}), {}, {} of {} slots of {} in use, {} published, \
                     subscribers: {}",
                    c.name,
                    c.publisher_pid,
                    if c.open { "open" } else { "gone" },
                    c.mode,
                    c.slots_in_use,
                    c.slots,
                    out::bytes(c.slot_size),
                    c.published,
                    if subs.is_empty() {
                        "none".to_string()
                    } else {
                        subs.join(", ")
                    }
                ))?;
            }
            Ok(())
        }
    }
}
