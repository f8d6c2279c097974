// Keeps dtrain_testing non-empty before any helper exists.
