// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title PlainToken
/// @notice A plain ERC-20 without EIP-3009 or EIP-2612, used by x402gate's tests as the asset
/// of Permit2 payments (docs/payments.md#permit2): the kind of token (USDT, DAI) that x402
/// pays only through Permit2. Name, symbol and decimals are constructor arguments; the
/// revert strings are OpenZeppelin 4's. An allowance of type(uint256).max never decreases,
/// as in OpenZeppelin and most tokens, which is what a payer's one-time Permit2 approval
/// relies on.
contract PlainToken {
    string public name;
    string public symbol;
    uint8 public immutable decimals;

    /// @notice The account allowed to mint.
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor(string memory name_, string memory symbol_, uint8 decimals_) {
        name = name_;
        symbol = symbol_;
        decimals = decimals_;
        owner = msg.sender;
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        require(spender != address(0), "ERC20: approve to the zero address");
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            require(value <= allowed, "ERC20: insufficient allowance");
            allowance[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    /// @notice Mints value to `to`; only the deployer may.
    function mint(address to, uint256 value) external {
        require(msg.sender == owner, "PlainToken: caller is not the owner");
        require(to != address(0), "ERC20: mint to the zero address");
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    function _transfer(address from, address to, uint256 value) private {
        require(to != address(0), "ERC20: transfer to the zero address");
        uint256 bal = balanceOf[from];
        require(value <= bal, "ERC20: transfer amount exceeds balance");
        balanceOf[from] = bal - value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
