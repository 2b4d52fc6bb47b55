//! A runtime call's refusal: its `aclError` code and the text
//! `aclGetRecentErrMsg` gives for it.

use hal_core::kit::vendor::Code;

/// A refusal: the code, and the text `aclGetRecentErrMsg` gives for it.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub(crate) code: Code,
    pub(crate) text: String,
}

impl From<Code> for Refusal {
    fn from(code: Code) -> Refusal {
        Refusal {
            code,
            text: String::new(),
        }
    }
}

/// A refusal with `code` and `text`.
pub(crate) fn refuse(code: Code, text: impl Into<String>) -> Refusal {
    Refusal {
        code,
        text: text.into(),
    }
}
