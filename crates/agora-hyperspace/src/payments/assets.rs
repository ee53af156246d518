//! What a node accepts as payment (spec §6.1 "PayChallenge: … points, USDC, accepted chains").
//!
//! USDC on EVM chains, named by CAIP-2 (`eip155:{chainId}`) as x402 v2 names them, each with
//! its token contract and EIP-712 domain name and version (these differ by chain: Base's USDC
//! signs as "USD Coin", Base Sepolia's as "USDC"; a wrong name is the commonest x402 failure, so
//! the name always comes from here and is sent in the challenge's `extra`); and points, the
//! network's own unit, paid with an Ed25519 signature of the payer's peer key.

use alloy_primitives::Address;

use super::eip712::parse_address;

/// The network name of points.
pub const POINTS_NETWORK: &str = "hyperspace:points";
/// The scheme of points payments.
pub const POINTS_SCHEME: &str = "points";
/// The scheme of EIP-3009 payments (x402's "exact").
pub const EXACT_SCHEME: &str = "exact";

/// USDC on one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdcAsset {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// The token contract (the EIP-712 `verifyingContract`).
    pub contract: Address,
    /// EIP-712 domain name.
    pub name: String,
    /// EIP-712 domain version.
    pub version: String,
}

impl UsdcAsset {
    /// Its CAIP-2 network name, `eip155:{chainId}`.
    pub fn network(&self) -> String {
        format!("eip155:{}", self.chain_id)
    }

    /// Its EIP-712 domain.
    pub fn domain(&self) -> alloy_sol_types::Eip712Domain {
        super::eip712::token_domain(&self.name, &self.version, self.chain_id, self.contract)
    }
}

/// USDC's decimals.
pub const USDC_DECIMALS: u32 = 6;

/// The default accepted USDC: Base Sepolia (84532, "USDC", version 2) and Base (8453, "USD
/// Coin", version 2), the domains x402's reference SDKs pin.
pub fn default_usdc() -> Vec<UsdcAsset> {
    [
        (84532, "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "USDC"),
        (
            8453,
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "USD Coin",
        ),
    ]
    .into_iter()
    .filter_map(|(chain_id, contract, name)| {
        Some(UsdcAsset {
            chain_id,
            contract: parse_address(contract)?,
            name: name.to_owned(),
            version: "2".to_owned(),
        })
    })
    .collect()
}

/// The chain id of an x402 network name: CAIP-2 `eip155:{id}`, or one of x402 v1's names.
pub fn chain_id_of(network: &str) -> Option<u64> {
    if let Some(id) = network.strip_prefix("eip155:") {
        return id.parse().ok().filter(|&n| n > 0);
    }
    match network {
        "base" => Some(8453),
        "base-sepolia" => Some(84532),
        "ethereum" => Some(1),
        "sepolia" => Some(11_155_111),
        "polygon" => Some(137),
        "polygon-amoy" => Some(80002),
        "arbitrum" => Some(42161),
        "arbitrum-sepolia" => Some(421_614),
        "optimism" => Some(10),
        "avalanche" => Some(43114),
        "avalanche-fuji" => Some(43113),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_network_names() {
        let d = default_usdc();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].network(), "eip155:84532");
        assert_eq!(chain_id_of("eip155:84532"), Some(84532));
        assert_eq!(chain_id_of("base-sepolia"), Some(84532));
        assert_eq!(chain_id_of("eip155:0"), None);
        assert_eq!(chain_id_of("solana"), None);
    }
}
