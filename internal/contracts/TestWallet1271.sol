// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title TestWallet1271
/// @notice A minimal contract wallet for tests: it accepts (ERC-1271) a 65-byte ECDSA signature
/// of its owner EOA over the hash it is asked about, and lets the owner make arbitrary calls.
/// A payment "from" this wallet is an EIP-3009 authorization whose EIP-712 digest the owner
/// signed; the token checks it through isValidSignature because the wallet has code.
contract TestWallet1271 {
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;
    bytes4 private constant ERC1271_INVALID = 0xffffffff;
    uint256 private constant HALF_CURVE_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice The EOA whose signatures this wallet accepts.
    address public immutable owner;

    constructor(address owner_) {
        require(owner_ != address(0), "TestWallet1271: zero owner");
        owner = owner_;
    }

    /// @notice ERC-1271: returns 0x1626ba7e when signature is the owner's signature of hash.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (signature.length != 65) {
            return ERC1271_INVALID;
        }
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (uint256(s) > HALF_CURVE_ORDER || (v != 27 && v != 28)) {
            return ERC1271_INVALID;
        }
        address signer = ecrecover(hash, v, r, s);
        if (signer == address(0) || signer != owner) {
            return ERC1271_INVALID;
        }
        return ERC1271_MAGIC_VALUE;
    }

    /// @notice Calls target with data; only the owner may. Reverts with the callee's revert data.
    function execute(address target, bytes calldata data) external returns (bytes memory) {
        require(msg.sender == owner, "TestWallet1271: caller is not the owner");
        (bool success, bytes memory result) = target.call(data);
        if (!success) {
            assembly {
                revert(add(result, 0x20), mload(result))
            }
        }
        return result;
    }
}
