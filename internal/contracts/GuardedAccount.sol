// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title GuardedAccount
/// @notice A minimal account that makes a call only with a policy approval: an EIP-712
/// signature by the verdict service's signer of a verdict that approved exactly this call
/// from this account on this chain, unexpired and not used before (docs/verdict-signing.md).
/// The typed data is the verdict service's: domain {name "x402gate verdict", version "1"},
/// Verdict(wallet, chainId, to, dataHash, value, policyVersion, outcome, nonce, expiry).
contract GuardedAccount {
    bytes32 private constant DOMAIN_TYPEHASH = keccak256("EIP712Domain(string name,string version)");
    bytes32 private constant VERDICT_TYPEHASH = keccak256(
        "Verdict(address wallet,uint256 chainId,address to,bytes32 dataHash,uint256 value,uint64 policyVersion,uint8 outcome,bytes32 nonce,uint64 expiry)"
    );
    uint8 private constant APPROVED = 1;
    uint256 private constant HALF_CURVE_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice The EIP-712 domain separator of verdict signatures.
    bytes32 public immutable DOMAIN_SEPARATOR;
    /// @notice The verdict service's signer (GET /.well-known/x402gate-verdict-signer).
    address public immutable signer;
    /// @notice The agent, the only one who may submit calls.
    address public immutable owner;
    /// @notice Approvals already used, by nonce (the verdict's requestHash).
    mapping(bytes32 => bool) public used;

    error NotOwner();
    error NotApproved();
    error Expired();
    error AlreadyUsed();
    error BadSignature();
    error CallFailed(bytes reason);

    event Executed(bytes32 indexed nonce, address indexed to, uint256 value);

    /// @notice What a verdict signed besides the call: the policy version, the outcome
    /// (1 approved, 2 rejected), the nonce and the last valid second.
    struct Approval {
        uint64 policyVersion;
        uint8 outcome;
        bytes32 nonce;
        uint64 expiry;
    }

    constructor(address signer_, address owner_) payable {
        require(signer_ != address(0) && owner_ != address(0), "GuardedAccount: zero address");
        signer = signer_;
        owner = owner_;
        DOMAIN_SEPARATOR = keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("x402gate verdict"), keccak256("1")));
    }

    receive() external payable {}

    /// @notice Calls to with value and data when signature is the signer's approval of exactly
    /// that call from this account on this chain. The approval is used up before the call.
    /// Reverts with the callee's revert data wrapped in CallFailed.
    function execute(address to, uint256 value, bytes calldata data, Approval calldata approval, bytes calldata signature)
        external
        returns (bytes memory)
    {
        if (msg.sender != owner) revert NotOwner();
        if (approval.outcome != APPROVED) revert NotApproved();
        if (block.timestamp > approval.expiry) revert Expired();
        if (used[approval.nonce]) revert AlreadyUsed();
        if (recover(digest(to, value, data, approval), signature) != signer) revert BadSignature();
        used[approval.nonce] = true;
        (bool ok, bytes memory result) = to.call{value: value}(data);
        if (!ok) revert CallFailed(result);
        emit Executed(approval.nonce, to, value);
        return result;
    }

    /// @notice The EIP-712 digest of a verdict approving this call from this account on this chain.
    function digest(address to, uint256 value, bytes calldata data, Approval calldata approval) public view returns (bytes32) {
        bytes32 structHash = keccak256(
            abi.encode(
                VERDICT_TYPEHASH,
                address(this),
                block.chainid,
                to,
                keccak256(data),
                value,
                approval.policyVersion,
                approval.outcome,
                approval.nonce,
                approval.expiry
            )
        );
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR, structHash));
    }

    /// @dev ecrecover of a 65-byte r || s || v signature, refusing malleated (high s) and
    /// malformed ones; address(0) for any refusal.
    function recover(bytes32 hash, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (uint256(s) > HALF_CURVE_ORDER || (v != 27 && v != 28)) return address(0);
        return ecrecover(hash, v, r, s);
    }
}
