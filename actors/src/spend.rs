//! The spend meter actor. In this version it only counts: estimated input tokens per call
//! and the provider's reported usage. Admission and ceilings build on it (issue 6).
//!
//! The estimate here is bytes/4 of the serialized request; the cl100k count the contract
//! names replaces it with the admission work.

use capsule_protocol::neutral::Usage;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

/// Messages.
pub enum SpendMsg {
    /// One call ended.
    Record {
        /// Estimated input tokens.
        estimated_input: u64,
        /// Provider usage, when reported.
        usage: Option<Usage>,
    },
    /// Totals so far: (estimated input, provider input, provider output).
    Totals(RpcReplyPort<SpendTotals>),
}

/// Running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpendTotals {
    /// Calls counted.
    pub calls: u64,
    /// Sum of estimated input tokens.
    pub estimated_input: u64,
    /// Sum of provider-reported input tokens.
    pub input_tokens_actual: u64,
    /// Sum of provider-reported output tokens.
    pub output_tokens_actual: u64,
}

/// The actor.
pub struct SpendMeter;

impl Actor for SpendMeter {
    type Msg = SpendMsg;
    type State = SpendTotals;
    type Arguments = ();

    async fn pre_start(&self, _myself: ActorRef<SpendMsg>, _: ()) -> Result<SpendTotals, ActorProcessingErr> {
        Ok(SpendTotals::default())
    }

    async fn handle(&self, _myself: ActorRef<SpendMsg>, msg: SpendMsg, state: &mut SpendTotals) -> Result<(), ActorProcessingErr> {
        match msg {
            SpendMsg::Record { estimated_input, usage } => {
                state.calls += 1;
                state.estimated_input += estimated_input;
                if let Some(u) = usage {
                    state.input_tokens_actual += u.input_tokens;
                    state.output_tokens_actual += u.output_tokens;
                }
            }
            SpendMsg::Totals(reply) => {
                let _ = reply.send(*state);
            }
        }
        Ok(())
    }
}
