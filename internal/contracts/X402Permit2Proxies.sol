// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ISignatureTransfer} from "./Permit2.sol";

/// @dev EIP-2612's permit, which settleWithPermit tries before the transfer.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;
}

/// @title X402Permit2ProxyBase
/// @notice What x402gate's two x402 Permit2 proxies share. They behave as the x402 reference
/// proxies (x402ExactPermit2Proxy and x402UptoPermit2Proxy) at the canonical addresses the
/// reference clients sign for, where tests place them with anvil_setCode
/// (docs/payments.md#permit2): the proxy is Permit2's spender, and the witness it hashes binds
/// the payee and the earliest time, so whoever calls cannot redirect the money. PERMIT2 is
/// the canonical Permit2 address as a constant, where the reference sets an immutable from
/// its constructor to the same address; the reentrancy guard's storage starts at zero, so
/// the code needs no constructor.
abstract contract X402Permit2ProxyBase {
    /// @notice Permit2, at its canonical address on every chain.
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    uint256 private _entered;

    event Settled();
    event SettledWithPermit();

    error InvalidDestination();
    error PaymentTooEarly();
    error InvalidOwner();
    error InvalidAmount();
    error Permit2612AmountMismatch();
    error ReentrancyGuardReentrantCall();

    modifier nonReentrant() {
        if (_entered == 1) revert ReentrancyGuardReentrantCall();
        _entered = 1;
        _;
        _entered = 0;
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 settlementAmount,
        address owner,
        address to,
        uint256 validAfter,
        bytes32 witnessHash,
        string memory witnessTypeString,
        bytes calldata signature
    ) internal {
        if (settlementAmount == 0) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: to, requestedAmount: settlementAmount}),
            owner,
            witnessHash,
            witnessTypeString,
            signature
        );
    }

    /// @dev Tries the payer's EIP-2612 permit of Permit2; a token without it, or an allowance
    /// already given, leaves the settlement to succeed or fail on its own.
    function _executePermit(address token, address owner, EIP2612Permit calldata permit2612, uint256 permittedAmount) internal {
        if (permit2612.value != permittedAmount) revert Permit2612AmountMismatch();
        try IERC20Permit(token).permit(owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s) {}
        catch {}
    }
}

/// @title X402ExactPermit2Proxy
/// @notice Settles an x402 `exact` Permit2 payment: always the permitted amount, to the
/// witness's payee.
contract X402ExactPermit2Proxy is X402Permit2ProxyBase {
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    struct Witness {
        address to;
        uint256 validAfter;
    }

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settleExact(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _executePermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settleExact(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settleExact(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        _settle(permit, permit.permitted.amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature);
    }
}

/// @title X402UptoPermit2Proxy
/// @notice Settles an x402 `upto` payment: an amount up to the permitted one, chosen by the
/// facilitator the witness names, which alone may call.
contract X402UptoPermit2Proxy is X402Permit2ProxyBase {
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error UnauthorizedFacilitator();
    error AmountExceedsPermitted();

    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _checkUpto(permit, amount, witness);
        _settleUpto(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _checkUpto(permit, amount, witness);
        _executePermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settleUpto(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    /// @dev Nothing above the signed maximum, and only by the facilitator the payer named.
    function _checkUpto(ISignatureTransfer.PermitTransferFrom calldata permit, uint256 amount, Witness calldata witness) private view {
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
    }

    function _settleUpto(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        _settle(permit, amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature);
    }
}
