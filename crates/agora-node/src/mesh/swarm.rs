//! Building the swarm: the transport (TCP + Noise + Yamux), the behaviours and their settings.

use std::io;
use std::time::Duration;

use libp2p::Transport as _;
use libp2p::gossipsub::{self, AllowAllSubscriptionFilter, MaxCountSubscriptionFilter};
use libp2p::kad::{self, store::MemoryStore};
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::{Swarm, identify, identity, noise, tcp, yamux};

use super::codec::BytesCodec;
use super::frames::FrameGuard;
use super::gated::Gated;
use super::muxer::{Splits, SplittingMuxer};
use super::pings;
use super::{
    DIRECTORY_PROTOCOL, ENVELOPE_PROTOCOL, HS_REQUEST_TIMEOUT, HYPERSPACE_PROTOCOL,
    IDENTIFY_VERSION, KAD_PROTOCOL, MAX_CONTROL_BYTES, MAX_FRAME_BYTES, MAX_HS_RESPONSE_BYTES,
    MAX_MEMORY_RESPONSE_BYTES, MAX_MESSAGE_BYTES, MAX_PAYMENT_BYTES, MAX_PEER_TOPICS,
    MAX_RECORD_BYTES, MAX_RESPONSE_BYTES, MEMORY_PROTOCOL, MEMORY_REQUEST_TIMEOUT, MeshConfig,
    MeshError, PAYMENTS_PROTOCOL, PROVIDER_TTL, RECORD_TTL, message_id, score_settings,
};

#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    /// First, so that a dial past the budget is denied before the others prepare for it.
    pub(super) dials: super::dials::DialGate,
    pub(super) identify: Gated<identify::Behaviour>,
    pub(super) ping: Gated<pings::Pings>,
    pub(super) kad: Gated<kad::Behaviour<MemoryStore>>,
    pub(super) gossipsub: FrameGuard,
    pub(super) direct: Gated<request_response::Behaviour<BytesCodec>>,
    pub(super) hs: Gated<request_response::Behaviour<BytesCodec>>,
    pub(super) mem: Gated<request_response::Behaviour<BytesCodec>>,
    pub(super) pay: Gated<request_response::Behaviour<BytesCodec>>,
    pub(super) dir: Gated<request_response::Behaviour<BytesCodec>>,
}

/// Largest directory request or response (`agora_directory::ask::MAX_MESSAGE_BYTES`).
const DIRECTORY_BYTES: u64 = agora_directory::ask::MAX_MESSAGE_BYTES as u64;
/// How long a directory search or answer may take (the asker waits less).
const DIRECTORY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most concurrent yamux streams per connection; chosen to bound stream receive windows.
///
/// rust-yamux closes the whole connection when a data frame's body exceeds 1 MiB, and
/// js-libp2p's yamux sends data frames as large as the send window its peer granted. rust-yamux
/// grows a stream's receive window (from 256 KiB) out of a per-connection pool of
/// `max_connection_receive_window − max_num_streams × 256 KiB`, with a 1 GiB connection window by
/// default, so after some traffic a js peer sending a large gossip message would kill the
/// connection. libp2p-yamux exposes only the stream count: with 4,093 streams the pool is
/// 1 GiB − 4,093 × 256 KiB = 768 KiB, so no stream's window ever exceeds 256 KiB + 768 KiB =
/// 1 MiB. Memory stays bounded by the same 1 GiB connection window as with the defaults.
pub const YAMUX_MAX_STREAMS: usize = 4093;

/// How long data sent on a mesh connection may stay unacknowledged before the kernel drops the
/// connection (`TCP_USER_TIMEOUT`, Linux).
///
/// libp2p closes a connection gracefully: yamux flushes its queued frames and a `GoAway` first.
/// Over a link that went down with data queued that flush never ends, so a connection the pings
/// gave up on (`mesh/pings.rs`) was never reported closed, and after the link healed the peer's
/// new connection was not a new peer (no `Connected`, no catch-up, gossip still sent to the dead
/// one): the failure of the partition test in CI run 19 (`docs/reliability.md`, "A partition").
/// With this bound the kernel fails the socket 15 s after its first unacknowledged byte, which
/// on a mesh connection (pinged every 5 s) comes at most 20 s after the link went down, and the
/// close completes with it.
pub(super) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);

/// Sets [`TCP_USER_TIMEOUT`] on a new mesh socket; a socket that refuses it keeps the kernel's
/// default (logged at debug).
fn bound_unacknowledged(stream: tcp::tokio::TcpStream) -> tcp::tokio::TcpStream {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt::TcpUserTimeout};
        let ms = u32::try_from(TCP_USER_TIMEOUT.as_millis()).unwrap_or(u32::MAX);
        if let Err(e) = setsockopt(&stream.0, TcpUserTimeout, &ms) {
            tracing::debug!(error = %e, "mesh: TCP_USER_TIMEOUT not set");
        }
    }
    stream
}

/// Yamux as the mesh uses it (see [`YAMUX_MAX_STREAMS`]).
fn yamux_config() -> yamux::Config {
    let mut c = yamux::Config::default();
    c.set_max_num_streams(YAMUX_MAX_STREAMS);
    c
}

pub(super) fn build_swarm(
    keypair: &identity::Keypair,
    cfg: &MeshConfig,
    splits: Splits,
) -> Result<Swarm<Behaviour>, MeshError> {
    let heartbeat = cfg.heartbeat;
    let swarm = libp2p::SwarmBuilder::with_existing_identity(keypair.clone())
        .with_tokio()
        .with_other_transport(
            |key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                Ok(
                    tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                        .map(|stream, _| bound_unacknowledged(stream))
                        .upgrade(libp2p::core::upgrade::Version::V1Lazy)
                        .authenticate(noise::Config::new(key)?)
                        .multiplex(yamux_config())
                        .map(move |(peer, muxer), _| (peer, SplittingMuxer::new(muxer, splits))),
                )
            },
        )
        .map_err(|e| MeshError::Build(e.to_string()))?
        .with_bandwidth_metrics(&mut cfg.telemetry.registry())
        .with_behaviour(|key| {
            let peer_id = key.public().to_peer_id();
            let gossip_config = gossipsub::ConfigBuilder::default()
                .max_transmit_size(MAX_FRAME_BYTES)
                .max_control_message_size(MAX_CONTROL_BYTES)
                .message_id_fn(message_id)
                .duplicate_cache_time(super::copies::DUPLICATE_CACHE_TIME)
                .validate_messages()
                .validation_mode(gossipsub::ValidationMode::Strict)
                .heartbeat_interval(heartbeat)
                // Refill a topic's mesh at the heartbeat once it falls below 3 peers. With 1 (a mesh
                // refilled only when empty) meshes eroded to 2.1 peers per node and topic, and at
                // 500 nodes a message crossed so many hops that it took seconds or was lost
                // (`docs/performance.md`, "Gossip at scale"). A mesh of a handful of nodes
                // still forms: gossipsub grafts what peers there are.
                .mesh_n_low(3)
                .mesh_n(4)
                .mesh_n_high(8)
                .mesh_outbound_min(1)
                .build()
                .map_err(|e| io::Error::other(e.to_string()))?;
            let filter = MaxCountSubscriptionFilter {
                filter: AllowAllSubscriptionFilter {},
                max_subscribed_topics: MAX_PEER_TOPICS,
                max_subscriptions_per_request: MAX_PEER_TOPICS,
            };
            let mut gossipsub = gossipsub::Behaviour::new_with_subscription_filter(
                gossipsub::MessageAuthenticity::Signed(key.clone()),
                gossip_config,
                filter,
            )
            .map_err(io::Error::other)?;
            let (params, thresholds) = score_settings();
            gossipsub
                .with_peer_score(params, thresholds)
                .map_err(io::Error::other)?;
            let gossipsub = FrameGuard::new(gossipsub, MAX_FRAME_BYTES);
            let mut kad_config = kad::Config::new(KAD_PROTOCOL);
            kad_config
                .set_record_filtering(kad::StoreInserts::FilterBoth)
                .set_record_ttl(Some(RECORD_TTL))
                .set_provider_record_ttl(Some(PROVIDER_TTL))
                // Re-provides and routing table refreshes are the mesh's own jittered chores
                // (`super::chores`); publishers re-sign and re-put their records themselves.
                .set_provider_publication_interval(None)
                .set_publication_interval(None)
                .set_periodic_bootstrap_interval(None)
                .set_max_packet_size(MAX_RECORD_BYTES + 16 * 1024)
                .set_query_timeout(Duration::from_secs(10));
            let store = MemoryStore::with_config(
                peer_id,
                kad::store::MemoryStoreConfig {
                    max_records: 4096,
                    max_value_bytes: MAX_RECORD_BYTES,
                    ..kad::store::MemoryStoreConfig::default()
                },
            );
            let mut kad = kad::Behaviour::with_config(peer_id, store, kad_config);
            kad.set_mode(Some(kad::Mode::Server));
            let direct = request_response::Behaviour::with_codec(
                BytesCodec {
                    max_request: MAX_MESSAGE_BYTES as u64,
                    max_response: MAX_RESPONSE_BYTES,
                },
                [(ENVELOPE_PROTOCOL, ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(10)),
            );
            let hs = request_response::Behaviour::with_codec(
                BytesCodec {
                    max_request: MAX_MESSAGE_BYTES as u64,
                    max_response: MAX_HS_RESPONSE_BYTES,
                },
                [(HYPERSPACE_PROTOCOL, ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(HS_REQUEST_TIMEOUT),
            );
            let mem = request_response::Behaviour::with_codec(
                BytesCodec {
                    max_request: MAX_MESSAGE_BYTES as u64,
                    max_response: MAX_MEMORY_RESPONSE_BYTES,
                },
                [(MEMORY_PROTOCOL, ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(MEMORY_REQUEST_TIMEOUT),
            );
            let pay = request_response::Behaviour::with_codec(
                BytesCodec {
                    max_request: MAX_PAYMENT_BYTES,
                    max_response: MAX_PAYMENT_BYTES,
                },
                [(PAYMENTS_PROTOCOL, ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(MEMORY_REQUEST_TIMEOUT),
            );
            let dir = request_response::Behaviour::with_codec(
                BytesCodec {
                    max_request: DIRECTORY_BYTES,
                    max_response: DIRECTORY_BYTES,
                },
                [(DIRECTORY_PROTOCOL, ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(DIRECTORY_TIMEOUT),
            );
            Ok(Behaviour {
                dials: super::dials::DialGate::default(),
                identify: Gated::new(identify::Behaviour::new(identify::Config::new(
                    IDENTIFY_VERSION.to_owned(),
                    key.public(),
                ))),
                ping: Gated::new(pings::Pings::new(libp2p::ping::Behaviour::new(
                    libp2p::ping::Config::new()
                        .with_interval(pings::INTERVAL)
                        .with_timeout(pings::TIMEOUT),
                ))),
                kad: Gated::new(kad),
                gossipsub,
                direct: Gated::new(direct),
                hs: Gated::new(hs),
                mem: Gated::new(mem),
                pay: Gated::new(pay),
                dir: Gated::new(dir),
            })
        })
        .map_err(|e| MeshError::Build(e.to_string()))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build();
    Ok(swarm)
}
