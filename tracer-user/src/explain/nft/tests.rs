//! nft JSON.
