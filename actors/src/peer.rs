//! Asking a session's peer by its role. A peer is found by its registry name at the moment it
//! is asked (a restarted child re-registers under the same name), and the answer keeps the
//! three ways a question can go wrong apart: nobody is registered under the name, the peer
//! stopped before it answered, or it is alive and slow. Callers decide per case; a journal that
//! cannot be reached stops the step instead of being skipped.

use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};
use std::time::Duration;

use crate::names;

/// How long each kind of question may take before it counts as unanswered.
pub mod wait {
    use std::time::Duration;

    /// A settings or credentials question (`/control`, a switch, a route): in memory only.
    pub const CONTROL: Duration = Duration::from_secs(10);
    /// A journal append or flush: a write to disk, possibly slow.
    pub const JOURNAL: Duration = Duration::from_secs(30);
    /// Draining the coalescer's held progress frames.
    pub const COALESCE: Duration = Duration::from_secs(10);
    /// A question answered when work ends (a task, a resume): bounded by the work's own
    /// limits (turns, deadlines), not by a clock here.
    pub const UNTIL_DONE: Duration = Duration::MAX;
}

/// Why a peer gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// Nothing is registered under the name: the peer is restarting or its session stopped.
    #[error("the {role} actor is not running (it is restarting, or the session stopped)")]
    Down {
        /// The peer's role.
        role: &'static str,
    },
    /// The peer stopped while the question was in its mailbox or being handled.
    #[error("the {role} actor stopped before it answered")]
    Dropped {
        /// The peer's role.
        role: &'static str,
    },
    /// The peer is alive but did not answer in time.
    #[error("the {role} actor did not answer within {} ms", after.as_millis())]
    Timeout {
        /// The peer's role.
        role: &'static str,
        /// How long it was given.
        after: Duration,
    },
}

/// A session's peer, named by role.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Shared: a peer is cloned wherever a message goes, and its name never changes.
    name: std::sync::Arc<str>,
    role: &'static str,
}

impl Peer {
    /// The session's actor with `role` (one of [`names::role`]).
    pub fn of(session_id: &str, role: &'static str) -> Peer {
        Peer { name: names::name(session_id, role).into(), role }
    }

    /// The gateway of a driver artifact.
    pub fn gateway(session_id: &str, artifact: &str) -> Peer {
        Peer { name: names::gateway(session_id, artifact).into(), role: "gateway" }
    }

    /// The actor of a hook artifact.
    pub fn hook(session_id: &str, artifact: &str) -> Peer {
        Peer { name: names::hook(session_id, artifact).into(), role: "hook" }
    }

    /// The role, as errors name it.
    pub fn role(&self) -> &'static str {
        self.role
    }

    /// The peer's reference now, if one is registered.
    pub fn find<M: Message>(&self) -> Result<ActorRef<M>, PeerError> {
        names::lookup::<M>(&self.name).ok_or(PeerError::Down { role: self.role })
    }

    /// Ask and wait at most `wait` for the answer.
    pub async fn ask<M: Message, R: Send + 'static>(
        &self,
        question: impl FnOnce(RpcReplyPort<R>) -> M,
        wait: Duration,
    ) -> Result<R, PeerError> {
        let peer = self.find::<M>()?;
        let timeout = (wait != Duration::MAX).then_some(wait);
        match peer.call(question, timeout).await {
            Ok(CallResult::Success(r)) => Ok(r),
            Ok(CallResult::Timeout) => Err(PeerError::Timeout { role: self.role, after: wait }),
            Ok(CallResult::SenderError) | Err(_) => Err(PeerError::Dropped { role: self.role }),
        }
    }

    /// Send without waiting for an answer.
    pub fn tell<M: Message>(&self, msg: M) -> Result<(), PeerError> {
        self.find::<M>()?.cast(msg).map_err(|_| PeerError::Dropped { role: self.role })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ractor::{Actor, ActorProcessingErr};

    enum Q {
        Answer(RpcReplyPort<u32>),
        Never(RpcReplyPort<u32>),
        Die(RpcReplyPort<u32>),
    }

    struct Answerer;

    impl Actor for Answerer {
        type Msg = Q;
        type State = Vec<RpcReplyPort<u32>>;
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<Q>, _: ()) -> Result<Self::State, ActorProcessingErr> {
            Ok(Vec::new())
        }

        async fn handle(&self, me: ActorRef<Q>, msg: Q, held: &mut Self::State) -> Result<(), ActorProcessingErr> {
            match msg {
                Q::Answer(r) => {
                    let _ = r.send(7);
                }
                Q::Never(r) => held.push(r),
                Q::Die(port) => {
                    drop(port);
                    me.stop(None);
                }
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_answer_a_timeout_a_dead_peer_and_a_missing_one_are_told_apart() {
        let peer = Peer::of("ses_peer_test", "journal");
        assert_eq!(peer.ask(Q::Answer, wait::CONTROL).await, Err(PeerError::Down { role: "journal" }));
        let (a, h) = Actor::spawn(Some(names::name("ses_peer_test", "journal")), Answerer, ()).await.expect("spawn");
        assert_eq!(peer.ask(Q::Answer, wait::CONTROL).await, Ok(7));
        let short = Duration::from_millis(20);
        assert_eq!(peer.ask(Q::Never, short).await, Err(PeerError::Timeout { role: "journal", after: short }));
        assert_eq!(peer.ask(Q::Die, wait::CONTROL).await, Err(PeerError::Dropped { role: "journal" }));
        h.await.expect("stopped");
        drop(a);
        assert!(peer.tell(Q::Answer(oneshot_port())).is_err(), "a stopped peer is not told");
    }

    fn oneshot_port() -> RpcReplyPort<u32> {
        tokio::sync::oneshot::channel().0.into()
    }
}
