// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title TestPriceFeed
/// @notice A Chainlink-style price feed for tests: the AggregatorV3Interface read side
/// (decimals, description, version, latestRoundData, getRoundData) with a round its owner
/// sets, answer and updatedAt included, so a test can make the feed fresh, stale or broken.
contract TestPriceFeed {
    struct Round {
        int256 answer;
        uint256 startedAt;
        uint256 updatedAt;
    }

    /// @notice The deployer; only it sets rounds.
    address public immutable owner;
    /// @notice The decimals of every answer (Chainlink's USD feeds use 8).
    uint8 public immutable decimals;
    /// @notice What the feed prices, e.g. "ETH / USD".
    string public description;
    /// @notice The id of the latest round; 0 before the first one.
    uint80 public latestRound;

    mapping(uint80 => Round) private rounds;

    constructor(uint8 decimals_, string memory description_) {
        owner = msg.sender;
        decimals = decimals_;
        description = description_;
    }

    /// @notice The aggregator interface version.
    function version() external pure returns (uint256) {
        return 4;
    }

    /// @notice Starts a new round with answer, as if updated at updatedAt (unix seconds).
    function setRound(int256 answer, uint256 updatedAt) external {
        require(msg.sender == owner, "TestPriceFeed: caller is not the owner");
        latestRound += 1;
        rounds[latestRound] = Round(answer, updatedAt, updatedAt);
    }

    /// @notice The latest round: (roundId, answer, startedAt, updatedAt, answeredInRound).
    function latestRoundData()
        external
        view
        returns (uint80 roundId, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound)
    {
        return getRoundData(latestRound);
    }

    /// @notice A past round; reverts for one that does not exist, as Chainlink's do.
    function getRoundData(uint80 roundId)
        public
        view
        returns (uint80, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound)
    {
        require(roundId != 0 && roundId <= latestRound, "No data present.");
        Round memory r = rounds[roundId];
        return (roundId, r.answer, r.startedAt, r.updatedAt, roundId);
    }
}
