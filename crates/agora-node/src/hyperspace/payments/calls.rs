//! The Micropayments JSON-RPC methods (`micropayments.*`; spec §6.2 the five methods, §6.3
//! the 402 flow, §6.4 the channel): challenges and credentials, channels opened, paid and
//! closed by this node, and the charge of a priced tool.

use super::*;

impl Shared {
    pub(super) async fn call(
        self: &Arc<Self>,
        principal: &Principal,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let missing = agora_hyperspace::payments::params::missing(method, params);
        if !missing.is_empty() {
            return Err(agora_hyperspace::params::problems_error(&missing));
        }
        match method {
            methods::CHALLENGE => {
                let p = ChallengeParams::parse(params).map_err(|e| invalid(e.0))?;
                let resource = p
                    .resource
                    .clone()
                    .unwrap_or_else(|| methods::CHALLENGE.to_owned());
                let c = self
                    .issue(&resource, p.price_points, p.price_usdc, p.payee_address)
                    .await?;
                Ok(c.to_wire())
            }
            methods::VERIFY => {
                let raw = verify_credential(params).map_err(|e| invalid(e.0))?;
                let cred = Credential::decode(raw).map_err(|r| refused(&r))?;
                let receipt = self.accept(&cred, None).await.map_err(|r| match r {
                    Accept::Refused(r) => refused(&r),
                    Accept::Error(e) => e,
                })?;
                let mut r = Map::new();
                r.insert("accepted".into(), json!(true));
                r.insert("receiptId".into(), json!(receipt.receipt_id));
                if let Ok(a) = receipt.amount.parse::<Amount>() {
                    let d = if receipt.network == POINTS_NETWORK {
                        0
                    } else {
                        USDC_DECIMALS
                    };
                    decimal::put(&mut r, "amount", a, d);
                }
                r.insert("payer".into(), json!(receipt.payer));
                r.insert("network".into(), json!(receipt.network));
                r.insert("receipt".into(), json!(receipt));
                Ok(Value::Object(r))
            }
            methods::CHANNEL_OPEN => {
                let default_chain = self.settings.chains.first().map(|c| c.chain_id);
                let p = OpenParams::parse(params, default_chain).map_err(|e| invalid(e.0))?;
                self.open(p, session_of(principal)).await
            }
            methods::CHANNEL_PAY if params.get("voucher").is_some_and(Value::is_object) => {
                let voucher: Voucher = serde_json::from_value(params["voucher"].clone())
                    .map_err(|e| invalid(format!("voucher: {e}")))?;
                self.pay_with_voucher(voucher).await
            }
            methods::CHANNEL_PAY => {
                let p = PayParams::parse(params).map_err(|e| invalid(e.0))?;
                self.pay(principal, p).await
            }
            methods::CHANNEL_CLOSE => {
                let id = close_channel_id(params).map_err(|e| invalid(e.0))?;
                self.close(principal, &id).await
            }
            _ => Err(RpcError::method_not_found()
                .with_data(Value::String(format!("unknown method {method:?}")))),
        }
    }

    /// Issues a challenge for `resource` (USDC to `pay_to`, else the wallet) and keeps it.
    pub(super) async fn issue(
        &self,
        resource: &str,
        price_points: Option<Amount>,
        price_usdc: Option<Amount>,
        pay_to: Option<alloy_primitives::Address>,
    ) -> Result<Challenge, RpcError> {
        let mut random = [0u8; 48];
        getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
        let now = now_ms();
        let pay_to = pay_to.or_else(|| eip712::parse_address(&self.wallet_address));
        let c = Challenge::new(
            random,
            resource,
            price_points,
            price_usdc,
            pay_to,
            &self.me,
            &self.settings.chains,
            now,
            u64::try_from(self.settings.challenge_ttl.as_millis()).unwrap_or(u64::MAX),
        );
        let mut dropped = Vec::new();
        {
            let mut held = self
                .challenges
                .lock()
                .map_err(|_| internal("challenge table poisoned"))?;
            if held.len() >= self.settings.max_challenges {
                // Expired unpaid challenges go first; paid ones stay (they answer replays).
                held.retain(|id, i| {
                    let keep = i.paid.is_some() || i.challenge.expires_at > now;
                    if !keep {
                        dropped.push(id.clone());
                    }
                    keep
                });
                if held.len() >= self.settings.max_challenges {
                    return Err(busy("too many open payment challenges"));
                }
            }
            held.insert(
                c.challenge_id.clone(),
                Issued {
                    challenge: c.clone(),
                    paid: None,
                },
            );
        }
        let mut rows: Vec<(PayTable, String, Option<String>)> = dropped
            .into_iter()
            .map(|id| (PayTable::Challenges, id, None))
            .collect();
        let row = serde_json::to_string(&Issued {
            challenge: c.clone(),
            paid: None,
        })
        .map_err(internal)?;
        rows.push((PayTable::Challenges, c.challenge_id.clone(), Some(row)));
        if let Err(e) = self.store.put_payments(rows).await {
            // Not written, not held: a challenge only the memory knew could be paid and lost.
            if let Ok(mut held) = self.challenges.lock() {
                held.remove(&c.challenge_id);
            }
            return Err(internal(e));
        }
        self.count("challenges");
        Ok(c)
    }

    /// Accepts `cred` for its challenge (or, when it names none, `fallback`: a challenge made
    /// for the request it pays, as the 402 flow does for x402 clients): checks, then commits
    /// the receipt, the nonce and the paid challenge together. Publishes the settlement record.
    pub(super) async fn accept(
        self: &Arc<Self>,
        cred: &Credential,
        fallback: Option<Challenge>,
    ) -> Result<Receipt, Accept> {
        let challenge = match &cred.challenge_id {
            Some(id) => {
                let held = self
                    .challenges
                    .lock()
                    .ok()
                    .and_then(|c| c.get(id).cloned())
                    .ok_or(Accept::Refused(Refusal::UnknownChallenge))?;
                if held.paid.is_some() {
                    return Err(Accept::Refused(Refusal::ChallengeUsed));
                }
                held.challenge
            }
            None => fallback.ok_or(Accept::Refused(Refusal::UnknownChallenge))?,
        };
        let now = now_ms();
        let verified = {
            let (cred, challenge) = (cred.clone(), challenge.clone());
            tokio::task::spawn_blocking(move || check(&cred, &challenge, now, Self::peer_key))
                .await
                .map_err(|e| Accept::Error(internal(e)))?
                .map_err(Accept::Refused)?
        };
        let nonce_key = format!("{}\0{}", verified.payer, hex0x(&cred.nonce()));
        let receipt = Receipt::new(cred, &verified, &challenge, now);
        let _commit = self.commit.lock().await;
        if self.nonces.lock().is_ok_and(|n| n.contains(&nonce_key)) {
            self.count("replays_refused");
            return Err(Accept::Refused(Refusal::Replayed));
        }
        let paid = self
            .challenges
            .lock()
            .ok()
            .and_then(|c| c.get(&challenge.challenge_id).map(|i| i.paid.is_some()));
        if paid == Some(true) {
            return Err(Accept::Refused(Refusal::ChallengeUsed));
        }
        if self
            .receipts
            .lock()
            .map_or(true, |r| r.len() >= self.settings.max_receipts)
        {
            return Err(Accept::Error(busy("the receipt store is full")));
        }
        let issued = Issued {
            challenge: challenge.clone(),
            paid: Some(receipt.receipt_id.clone()),
        };
        let rows = vec![
            (
                PayTable::Receipts,
                receipt.receipt_id.clone(),
                Some(serde_json::to_string(&receipt).map_err(|e| Accept::Error(internal(e)))?),
            ),
            (
                PayTable::Nonces,
                nonce_key.clone(),
                Some(
                    json!({ "receiptId": receipt.receipt_id, "validBefore": match &cred.payer {
                        agora_hyperspace::payments::credential::Payer::Evm(a) => a.valid_before,
                        agora_hyperspace::payments::credential::Payer::Points(p) => p.valid_before,
                    } })
                    .to_string(),
                ),
            ),
            (
                PayTable::Challenges,
                challenge.challenge_id.clone(),
                Some(serde_json::to_string(&issued).map_err(|e| Accept::Error(internal(e)))?),
            ),
        ];
        self.store
            .put_payments(rows)
            .await
            .map_err(|e| Accept::Error(internal(e)))?;
        if let Ok(mut n) = self.nonces.lock() {
            n.insert(nonce_key);
        }
        if let Ok(mut r) = self.receipts.lock() {
            r.insert(receipt.receipt_id.clone());
        }
        if let Ok(mut c) = self.challenges.lock() {
            c.insert(challenge.challenge_id.clone(), issued);
        }
        drop(_commit);
        self.count("payments_accepted");
        let domain = (verified.scheme == EXACT_SCHEME)
            .then(|| {
                challenge
                    .usdc_assets()
                    .into_iter()
                    .find(|a| a.network() == verified.network)
                    .map(|a| (a.chain_id, a.contract.to_checksum(None), a.name, a.version))
            })
            .flatten();
        let record = Record::Payment {
            receipt_id: receipt.receipt_id.clone(),
            at: now,
            amount: receipt.amount.clone(),
            domain,
            credential: receipt.credential.clone(),
        };
        let s = Arc::clone(self);
        tokio::spawn(async move { s.settle(&record).await });
        Ok(receipt)
    }

    /// −32002 "Payment Required" with a fresh challenge for `c` in `data.challenge`, and the
    /// reason of a refused payment when there was one.
    pub(super) async fn payment_required(&self, c: &Charge, why: Option<RpcError>) -> RpcError {
        let challenge = match self
            .issue(&c.resource, c.price.points, c.price.usdc, None)
            .await
        {
            Ok(ch) => ch.to_wire(),
            Err(e) => return e,
        };
        let (reason, message) = why.map_or_else(
            || {
                (
                    "payment-required".to_owned(),
                    format!("Payment Required: {} has a price", c.resource),
                )
            },
            |e| {
                let reason = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
                    .to_owned();
                (reason, e.message)
            },
        );
        RpcError::from_code(RpcCode::BUDGET_EXCEEDED)
            .with_message(message)
            .with_data(json!({ "reason": reason, "challenge": challenge }))
    }

    /// Takes payment for one use of `c.resource`: a credential (for a challenge of this
    /// resource, or matched against its price), a payment on a channel to `c.payee` that this
    /// node pays, or a voucher already accepted on a channel this node is paid on.
    pub(super) async fn charge(self: &Arc<Self>, c: &Charge) -> Result<Value, RpcError> {
        let Some(payment) = &c.payment else {
            return Err(self.payment_required(c, None).await);
        };
        if let Some(raw) = payment.get("credential") {
            let cred = match Credential::decode(raw) {
                Ok(cred) => cred,
                Err(r) => return Err(self.payment_required(c, Some(refused(&r))).await),
            };
            if let Some(id) = &cred.challenge_id {
                let resource = self
                    .challenges
                    .lock()
                    .ok()
                    .and_then(|m| m.get(id).map(|i| i.challenge.resource.clone()));
                if resource.as_deref().is_some_and(|r| r != c.resource) {
                    return Err(self
                        .payment_required(c, Some(refused(&Refusal::ChallengeMismatch)))
                        .await);
                }
            }
            let mut random = [0u8; 48];
            getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
            let fallback = Challenge::new(
                random,
                &c.resource,
                c.price.points,
                c.price.usdc,
                eip712::parse_address(&self.wallet_address),
                &self.me,
                &self.settings.chains,
                now_ms(),
                u64::try_from(self.settings.challenge_ttl.as_millis()).unwrap_or(u64::MAX),
            );
            return match self.accept(&cred, Some(fallback)).await {
                Ok(receipt) => Ok(json!({
                    "receiptId": receipt.receipt_id,
                    "amount": receipt.amount,
                    "payer": receipt.payer,
                    "paymentResponse": receipt.payment_response(),
                })),
                Err(Accept::Refused(r)) => Err(self.payment_required(c, Some(refused(&r))).await),
                Err(Accept::Error(e)) => Err(e),
            };
        }
        let channel_id = payment
            .get("channelId")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("payment is {credential} or {channelId}"))?;
        let cell = self
            .channel(channel_id)
            .ok_or_else(|| no_channel(channel_id))?;
        if let Some(nonce) = payment.get("nonce").and_then(Value::as_u64) {
            // Between nodes: the caller's node paid this node on the channel; redeem it once.
            let mut held = cell.lock().await;
            let payer_ok = c.from.as_deref() == Some(held.channel.payer_peer.as_str());
            if held.role != Role::Payee || !payer_ok {
                return Err(invalid(
                    "this node is not paid on that channel by the caller's node",
                ));
            }
            let price = Self::price_in(&c.price, &held.channel.currency)?;
            let mut next = held.clone();
            let slot = next
                .recent
                .iter_mut()
                .find(|(n, _, _)| *n == nonce)
                .ok_or_else(|| invalid(format!("no accepted voucher {nonce} on the channel")))?;
            let paid: Amount = slot.1.parse().unwrap_or(0);
            if slot.2 || paid < price {
                return Err(invalid(format!(
                    "voucher {nonce} was already redeemed or pays less than {price}"
                )));
            }
            slot.2 = true;
            self.persist(&next).await?;
            *held = next;
            return Ok(
                json!({ "channelId": channel_id, "nonce": nonce, "amount": amount_json(paid) }),
            );
        }
        let (price, payee_ok) = {
            let held = cell.lock().await;
            (
                Self::price_in(&c.price, &held.channel.currency)?,
                held.channel.payee == c.payee && held.role != Role::Payee,
            )
        };
        if !payee_ok {
            return Err(invalid(format!(
                "channel {channel_id} does not pay {} from this node",
                c.payee
            )));
        }
        let paid = self
            .pay(
                &c.principal,
                PayParams {
                    channel_id: channel_id.to_owned(),
                    amount: PayAmount::Atomic(price),
                    memo: c
                        .resource
                        .chars()
                        .take(agora_hyperspace::payments::params::MAX_MEMO)
                        .collect(),
                },
            )
            .await?;
        Ok(json!({ "channelId": channel_id, "nonce": paid["nonce"], "amount": amount_json(price) }))
    }

    /// The price in a channel's currency.
    pub(super) fn price_in(
        price: &agora_hyperspace::payments::Price,
        currency: &Currency,
    ) -> Result<Amount, RpcError> {
        match currency {
            Currency::Usdc { .. } => price.usdc,
            Currency::Points => price.points,
        }
        .filter(|p| *p > 0)
        .ok_or_else(|| invalid(format!("the price has no {} amount", currency.label())))
    }

    pub(super) async fn open(
        self: &Arc<Self>,
        p: OpenParams,
        session: Option<String>,
    ) -> Result<Value, RpcError> {
        if !self.accepts(&p.currency) {
            return Err(invalid("this node does not accept that chain"));
        }
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|_| internal("no system randomness"))?;
        let channel = Channel::open(
            &self.payer_of(&p.currency),
            &self.me,
            &p.payee,
            p.currency,
            p.budget,
            salt,
            now_ms(),
        );
        let role = if p.payee == self.me {
            Role::Both
        } else {
            match self
                .request(
                    &p.payee,
                    &PayRequest::Open {
                        channel: channel.clone(),
                    },
                )
                .await?
            {
                PayResponse::Opened => Role::Payer,
                other => return Err(other.into_error()),
            }
        };
        let held = Held {
            channel,
            role,
            pending: None,
            session,
            recent: VecDeque::new(),
        };
        self.persist(&held).await?;
        let wire = held.channel.to_wire();
        self.insert_channel(held)?;
        self.count("channels_opened");
        Ok(wire)
    }

    pub(super) fn may_act(principal: &Principal, held: &Held) -> bool {
        match principal {
            Principal::Session(s) => held.session.as_deref() == Some(s.as_str()),
            Principal::Local | Principal::ApiKey => true,
        }
    }

    /// Signs the voucher `(nonce, cumulative)` of `channel` with this node's key for its
    /// currency.
    pub(super) fn sign_voucher(
        &self,
        channel: &Channel,
        nonce: u64,
        cumulative: Amount,
        amount: Amount,
        memo: &str,
    ) -> Result<Voucher, RpcError> {
        let bytes = channel
            .signed_bytes(nonce, cumulative)
            .ok_or_else(|| internal("bad channel id"))?;
        let signature = match channel.currency {
            Currency::Usdc { .. } => {
                let digest = alloy_primitives::B256::from_slice(&bytes);
                hex0x(&eip712::sign(&self.wallet, &digest).map_err(internal)?)
            }
            Currency::Points => hex0x(&self.key.sign(&bytes).to_bytes()),
        };
        Ok(Voucher {
            channel_id: channel.channel_id.clone(),
            nonce,
            cumulative,
            amount,
            memo: memo.to_owned(),
            signature,
        })
    }

    pub(super) async fn pay(
        self: &Arc<Self>,
        principal: &Principal,
        p: PayParams,
    ) -> Result<Value, RpcError> {
        let cell = self
            .channel(&p.channel_id)
            .ok_or_else(|| no_channel(&p.channel_id))?;
        let mut held = cell.lock().await;
        if !Self::may_act(principal, &held) || held.role == Role::Payee {
            return Err(invalid(format!(
                "this node does not pay channel {}",
                p.channel_id
            )));
        }
        let amount = p
            .atomic(held.channel.currency.decimals())
            .map_err(|e| invalid(e.0))?;
        self.resolve_pending(&mut held).await?;
        for _attempt in 0..2 {
            let (nonce, cumulative) = held
                .channel
                .next(amount)
                .map_err(|e| channel_error(&e, held.channel.currency.decimals()))?;
            let voucher = self.sign_voucher(&held.channel, nonce, cumulative, amount, &p.memo)?;
            if held.role == Role::Both {
                held.channel
                    .check_signature(&voucher, Self::peer_key)
                    .map_err(|e| channel_error(&e, held.channel.currency.decimals()))?;
                let mut next = held.clone();
                next.channel
                    .accept(&voucher)
                    .map_err(|e| channel_error(&e, held.channel.currency.decimals()))?;
                self.persist(&next).await?;
                *held = next;
                self.count("vouchers_paid");
                return Ok(paid(nonce, &held.channel));
            }
            // Remember what is sent before sending: a crash or a lost answer leaves it pending.
            let mut sent = held.clone();
            sent.pending = Some(voucher.clone());
            self.persist(&sent).await?;
            *held = sent;
            let answer = self.send_voucher(&held.channel.payee, &voucher).await?;
            let took = payee_took(&answer, &voucher);
            match answer {
                PayResponse::Paid { .. } if took => {
                    self.settle_pending(&mut held, &voucher, true).await?;
                    self.count("vouchers_paid");
                    return Ok(paid(nonce, &held.channel));
                }
                // An earlier send of this very voucher landed: counted, then pay again with
                // the next nonce.
                PayResponse::Refused { .. } if took => {
                    self.settle_pending(&mut held, &voucher, true).await?;
                    self.count("vouchers_resynced");
                }
                PayResponse::Refused {
                    code,
                    message,
                    data,
                    ..
                } => {
                    self.settle_pending(&mut held, &voucher, false).await?;
                    return Err(RpcError::from_code(RpcCode(code))
                        .with_message(message)
                        .with_data(data));
                }
                other => return Err(other.into_error()),
            }
        }
        Err(internal("the payee and this node disagree on the channel"))
    }

    /// Settles the voucher an earlier payment sent without getting an answer (a lost answer,
    /// a cut link, a crash) before a new one is signed: it is sent again, as it was, and the
    /// payee's answer says whether it took it (`paid`, or `duplicate-nonce` with this voucher's
    /// nonce and total: counted now) or not (any other refusal: dropped). Signing the next
    /// voucher over it instead would reuse its nonce with another total, which a payee that took
    /// it refuses for good (found by the partition test, `docs/reliability.md`). When the payee
    /// is still unreachable the error is returned and the voucher stays pending.
    async fn resolve_pending(&self, held: &mut Held) -> Result<(), RpcError> {
        let Some(voucher) = held.pending.clone() else {
            return Ok(());
        };
        let answer = self.send_voucher(&held.channel.payee, &voucher).await?;
        let took = payee_took(&answer, &voucher);
        self.settle_pending(held, &voucher, took).await?;
        if took {
            self.count("vouchers_resynced");
        }
        Ok(())
    }

    /// Sends `voucher` to the channel's payee; no answer (a lost answer, a cut link) is the
    /// −32006 error that names the voucher left pending.
    async fn send_voucher(&self, payee: &str, voucher: &Voucher) -> Result<PayResponse, RpcError> {
        self.request(
            payee,
            &PayRequest::Pay {
                voucher: voucher.clone(),
            },
        )
        .await
        .map_err(|e| unanswered(e, voucher))
    }

    /// Ends `held`'s pending `voucher`: counted into the channel when the payee took it,
    /// dropped otherwise. The new state is written before `held` changes.
    async fn settle_pending(
        &self,
        held: &mut Held,
        voucher: &Voucher,
        took: bool,
    ) -> Result<(), RpcError> {
        let mut next = held.clone();
        if took {
            next.channel
                .accept(voucher)
                .map_err(|e| channel_error(&e, held.channel.currency.decimals()))?;
        }
        next.pending = None;
        self.persist(&next).await?;
        *held = next;
        Ok(())
    }

    /// The payee's side of a voucher: the payer's signature, then the channel's checks, then
    /// the new state written, all under the channel's lock (held by the caller).
    pub(super) async fn take_voucher(
        &self,
        held: &mut Held,
        voucher: &Voucher,
    ) -> Result<(), RpcError> {
        // The channel's state first (closed, nonce, budget: no signature needed to refuse),
        // then the signature of a voucher that would be accepted.
        let mut next = held.clone();
        let checked = next
            .channel
            .accept(voucher)
            .and_then(|()| held.channel.check_signature(voucher, Self::peer_key));
        if let Err(e) = checked {
            self.count("vouchers_refused");
            return Err(channel_error(&e, held.channel.currency.decimals()));
        }
        next.recent
            .push_back((voucher.nonce, voucher.amount.to_string(), false));
        while next.recent.len() > RECENT_VOUCHERS {
            next.recent.pop_front();
        }
        self.persist(&next).await?;
        *held = next;
        self.count("vouchers_accepted");
        Ok(())
    }

    /// `channel.pay` with a voucher the payer signed itself (an agent holding its own key, or
    /// its node), given to the payee's node.
    pub(super) async fn pay_with_voucher(&self, voucher: Voucher) -> Result<Value, RpcError> {
        let cell = self
            .channel(&voucher.channel_id)
            .ok_or_else(|| no_channel(&voucher.channel_id))?;
        let mut held = cell.lock().await;
        if held.role == Role::Payer {
            return Err(invalid(format!(
                "this node is not paid on channel {}",
                voucher.channel_id
            )));
        }
        self.take_voucher(&mut held, &voucher)
            .await
            .map_err(|mut e| {
                if let Some(Value::Object(d)) = e.data.as_mut() {
                    d.insert("lastNonce".into(), json!(held.channel.nonce));
                    decimal::put(
                        d,
                        "spent",
                        held.channel.spent,
                        held.channel.currency.decimals(),
                    );
                }
                e
            })?;
        Ok(paid(held.channel.nonce, &held.channel))
    }

    pub(super) async fn close(
        self: &Arc<Self>,
        principal: &Principal,
        id: &str,
    ) -> Result<Value, RpcError> {
        let cell = self.channel(id).ok_or_else(|| no_channel(id))?;
        let mut held = cell.lock().await;
        if !Self::may_act(principal, &held) {
            return Err(invalid(format!("no channel {id}")));
        }
        let (total, refund) = match held.role {
            Role::Payer => match self
                .request(
                    &held.channel.payee.clone(),
                    &PayRequest::Close {
                        channel_id: id.to_owned(),
                    },
                )
                .await?
            {
                PayResponse::Closed {
                    total_spent,
                    refund,
                } => {
                    let mut next = held.clone();
                    next.channel.spent = total_spent.max(next.channel.spent);
                    next.channel.close(now_ms());
                    next.pending = None;
                    self.persist(&next).await?;
                    *held = next;
                    (total_spent, refund)
                }
                other => return Err(other.into_error()),
            },
            Role::Payee | Role::Both => {
                let r = self.close_as_payee(&mut held).await?;
                if held.role == Role::Payee {
                    // Best effort: tell the payer's node (it learns it at its next payment
                    // otherwise, from the refusal).
                    let (payer, cid) = (held.channel.payer_peer.clone(), id.to_owned());
                    let s = Arc::clone(self);
                    tokio::spawn(async move {
                        let _ = s
                            .request(&payer, &PayRequest::Close { channel_id: cid })
                            .await;
                    });
                }
                r
            }
        };
        self.count("channels_closed");
        let mut r = Map::new();
        r.insert("channelId".into(), json!(id));
        let d = held.channel.currency.decimals();
        decimal::put(&mut r, "totalSpent", total, d);
        decimal::put(&mut r, "refund", refund, d);
        Ok(Value::Object(r))
    }

    /// Closes a channel this node is paid on, durably, and publishes its settlement record.
    pub(super) async fn close_as_payee(
        self: &Arc<Self>,
        held: &mut Held,
    ) -> Result<(Amount, Amount), RpcError> {
        let was_open = held.channel.status == Status::Open;
        let mut next = held.clone();
        let (total, refund) = next.channel.close(now_ms());
        if was_open {
            self.persist(&next).await?;
        }
        *held = next;
        if was_open {
            let voucher = held.channel.last_signature.as_ref().map(|sig| Voucher {
                channel_id: held.channel.channel_id.clone(),
                nonce: held.channel.nonce,
                cumulative: held.channel.spent,
                amount: 0,
                memo: String::new(),
                signature: sig.clone(),
            });
            let record = Record::ChannelClose {
                channel: held.channel.clone(),
                voucher,
                at: held.channel.closed_at.unwrap_or_else(now_ms),
            };
            let s = Arc::clone(self);
            tokio::spawn(async move { s.settle(&record).await });
        }
        Ok((total, refund))
    }
}

/// Whether the payee's answer to `voucher` says it took it: `paid` with its nonce and total, or
/// a `duplicate-nonce` refusal naming them (an earlier send of the same voucher landed).
fn payee_took(answer: &PayResponse, voucher: &Voucher) -> bool {
    match answer {
        PayResponse::Paid { nonce, spent } => {
            *nonce == voucher.nonce && *spent == voucher.cumulative
        }
        PayResponse::Refused {
            last_nonce: Some(last),
            spent: Some(spent),
            data,
            ..
        } => {
            *last == voucher.nonce
                && *spent == voucher.cumulative
                && data["reason"] == "duplicate-nonce"
        }
        _ => false,
    }
}

/// A payment whose voucher got no answer (the payee unreachable): the error's `data` names the
/// voucher left pending — `pendingNonce`, `pendingCumulativeAtomic` — which the payee may have
/// taken and the next payment settles (counted once, or dropped).
fn unanswered(e: RpcError, voucher: &Voucher) -> RpcError {
    let mut data = match e.data.clone() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    data.insert("pendingNonce".into(), json!(voucher.nonce));
    data.insert(
        "pendingCumulativeAtomic".into(),
        json!(voucher.cumulative.to_string()),
    );
    e.with_data(Value::Object(data))
}

/// `channel.pay`'s result: `{nonce, remaining, remainingAtomic}` (spec §6.2).
fn paid(nonce: u64, channel: &Channel) -> Value {
    let mut r = Map::new();
    r.insert("nonce".into(), json!(nonce));
    decimal::put(
        &mut r,
        "remaining",
        channel.remaining(),
        channel.currency.decimals(),
    );
    Value::Object(r)
}

/// −32602 for a channel this node does not hold: `data {field: "channelId", reason:
/// "not-found", channelId}`.
fn no_channel(id: &str) -> RpcError {
    invalid(format!("no channel {id}"))
        .with_data(json!({ "field": "channelId", "reason": "not-found", "channelId": id }))
}
