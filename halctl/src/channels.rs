//! `halctl channel ls`: this user's channels (`hal::channel`), their
//! publishers, subscribers and slots in use.

use clap::Subcommand;
use hal::channel::{self, ChannelInfo, Mode};
use serde::Serialize;

use crate::fail::{CmdResult, Context};
use crate::out;

/// `halctl channel ...`.
#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// List this user's channels: publisher (and whether it is open), mode,
    /// slots in use, samples published, subscribers.
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
                let subs: Vec<String> = c.subscribers.iter().map(u32::to_string).collect();
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
