-- The database holding jetcron's run history.
CREATE DATABASE IF NOT EXISTS jetcron;
