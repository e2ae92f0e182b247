// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title TestSanctionsOracle
/// @notice A sanctions oracle for tests with the read side and the events of Chainalysis's
/// SanctionsList: isSanctioned(address) (selector 0xdf592f7d), and a list its owner edits.
contract TestSanctionsOracle {
    /// @notice The deployer; only it edits the list.
    address public immutable owner;

    mapping(address => bool) private sanctioned;

    event SanctionedAddressesAdded(address[] addrs);
    event SanctionedAddressesRemoved(address[] addrs);

    constructor() {
        owner = msg.sender;
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "TestSanctionsOracle: caller is not the owner");
        _;
    }

    /// @notice Adds addrs to the list.
    function addToSanctionsList(address[] calldata addrs) external onlyOwner {
        for (uint256 i = 0; i < addrs.length; i++) {
            sanctioned[addrs[i]] = true;
        }
        emit SanctionedAddressesAdded(addrs);
    }

    /// @notice Removes addrs from the list.
    function removeFromSanctionsList(address[] calldata addrs) external onlyOwner {
        for (uint256 i = 0; i < addrs.length; i++) {
            sanctioned[addrs[i]] = false;
        }
        emit SanctionedAddressesRemoved(addrs);
    }

    /// @notice Whether addr is on the list.
    function isSanctioned(address addr) external view returns (bool) {
        return sanctioned[addr];
    }
}
