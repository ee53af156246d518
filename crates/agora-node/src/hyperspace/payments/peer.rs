//! Node-to-node payment requests on `/agora/payments/1.0.0` (spec §6.4, the channel
//! between nodes): the messages, asking another node, and answering one.

use super::*;

impl Shared {
    pub(super) async fn request(
        &self,
        peer: &str,
        request: &PayRequest,
    ) -> Result<PayResponse, RpcError> {
        let target: PeerId = peer
            .parse()
            .map_err(|_| invalid(format!("{peer:?} is not a PeerId")))?;
        let data = serde_json::to_vec(request).map_err(internal)?;
        match self
            .link
            .request(target, data, self.settings.peer_timeout)
            .await
        {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| peer_unavailable(peer, &format!("bad answer: {e}"))),
            Err(e @ Unanswered::ShuttingDown) => Err(internal(e)),
            Err(Unanswered::Failed(why)) => Err(peer_unavailable(peer, &why)),
        }
    }

    pub(super) async fn respond(&self, channel: ResponseChannel<Vec<u8>>, response: &PayResponse) {
        let Ok(data) = serde_json::to_vec(response) else {
            return;
        };
        self.link.respond(channel, data).await;
    }

    pub(super) async fn peer_request(self: &Arc<Self>, peer: &PeerId, data: &[u8]) -> PayResponse {
        let refuse = |e: RpcError, held: Option<&Held>| PayResponse::Refused {
            code: e.code.0,
            message: e.message,
            data: e.data.unwrap_or(Value::Null),
            last_nonce: held.map(|h| h.channel.nonce),
            spent: held.map(|h| h.channel.spent),
        };
        let request: PayRequest = match serde_json::from_slice(data) {
            Ok(r) => r,
            Err(e) => return refuse(invalid(format!("bad payment request: {e}")), None),
        };
        let from = peer.to_string();
        match request {
            PayRequest::Open { channel } => {
                if channel.payee != self.me || channel.payer_peer != from {
                    return refuse(
                        invalid("the channel names another payee or payer node"),
                        None,
                    );
                }
                if channel.status != Status::Open || channel.spent != 0 || channel.nonce != 0 {
                    return refuse(invalid("a new channel is open with nothing spent"), None);
                }
                if !self.accepts(&channel.currency) {
                    return refuse(invalid("this node does not accept that chain"), None);
                }
                let payer_ok = match channel.currency {
                    Currency::Usdc { .. } => eip712::parse_address(&channel.payer).is_some(),
                    Currency::Points => channel.payer == from,
                };
                if !payer_ok || channel.id_bytes().is_none() {
                    return refuse(invalid("the channel's payer or id is malformed"), None);
                }
                let held = Held {
                    channel,
                    role: Role::Payee,
                    pending: None,
                    session: None,
                    recent: VecDeque::new(),
                };
                if let Err(e) = self.insert_channel(held.clone()) {
                    return refuse(e, None);
                }
                match self.persist(&held).await {
                    Ok(()) => PayResponse::Opened,
                    Err(e) => {
                        if let Ok(mut m) = self.channels.lock() {
                            m.remove(&held.channel.channel_id);
                        }
                        refuse(e, None)
                    }
                }
            }
            PayRequest::Pay { voucher } => {
                let Some(cell) = self.channel(&voucher.channel_id) else {
                    return refuse(invalid(format!("no channel {}", voucher.channel_id)), None);
                };
                let mut held = cell.lock().await;
                if held.role != Role::Payee || held.channel.payer_peer != from {
                    return refuse(
                        invalid("this node is not paid on that channel by you"),
                        None,
                    );
                }
                match self.take_voucher(&mut held, &voucher).await {
                    Ok(()) => PayResponse::Paid {
                        nonce: held.channel.nonce,
                        spent: held.channel.spent,
                    },
                    Err(e) => refuse(e, Some(&held)),
                }
            }
            PayRequest::Close { channel_id } => {
                let Some(cell) = self.channel(&channel_id) else {
                    return refuse(invalid(format!("no channel {channel_id}")), None);
                };
                let mut held = cell.lock().await;
                let party = held.channel.payer_peer == from || held.channel.payee == from;
                if !party {
                    return refuse(invalid("not a party of that channel"), None);
                }
                match held.role {
                    Role::Payee => match self.close_as_payee(&mut held).await {
                        Ok((total_spent, refund)) => PayResponse::Closed {
                            total_spent,
                            refund,
                        },
                        Err(e) => refuse(e, Some(&held)),
                    },
                    // The payee closed it: the payer's node records the close.
                    Role::Payer | Role::Both => {
                        let mut next = held.clone();
                        let (total_spent, refund) = next.channel.close(now_ms());
                        if let Err(e) = self.persist(&next).await {
                            return refuse(e, Some(&held));
                        }
                        *held = next;
                        PayResponse::Closed {
                            total_spent,
                            refund,
                        }
                    }
                }
            }
        }
    }
}

/// A request between nodes (JSON, tag `op`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(super) enum PayRequest {
    /// Open `channel` (the payer's record) at the payee.
    Open { channel: Channel },
    /// A voucher for a channel the requester pays.
    Pay { voucher: Voucher },
    /// Close a channel.
    Close {
        #[serde(rename = "channelId")]
        channel_id: String,
    },
}

/// An answer between nodes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(super) enum PayResponse {
    Opened,
    #[serde(rename_all = "camelCase")]
    Paid {
        nonce: u64,
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        spent: Amount,
    },
    #[serde(rename_all = "camelCase")]
    Closed {
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        total_spent: Amount,
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        refund: Amount,
    },
    /// Refused: the JSON-RPC code, message and data the payer's node passes on, plus the
    /// channel's last nonce and total when it is known (so that the payer can resume).
    #[serde(rename_all = "camelCase")]
    Refused {
        code: i32,
        message: String,
        data: Value,
        last_nonce: Option<u64>,
        #[serde(default, with = "agora_hyperspace::payments::amount_serde::option")]
        spent: Option<Amount>,
    },
}

impl PayResponse {
    /// The error a caller gets for an answer that is not the one expected: a refusal passes on
    /// its code, message and data; anything else is an internal error.
    pub(super) fn into_error(self) -> RpcError {
        match self {
            Self::Refused {
                code,
                message,
                data,
                ..
            } => RpcError::from_code(RpcCode(code))
                .with_message(message)
                .with_data(data),
            other => internal(format!("unexpected answer {other:?}")),
        }
    }
}
