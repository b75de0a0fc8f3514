-- idx_following_author keeps one author's follow edges together in user
-- order. A fan-out batch reads its recipients' edges through it as one range
-- (author_id = ? AND user_id > ? AND user_id <= ?), so its reads and shared
-- locks fall on a few index pages instead of one primary-key page per
-- recipient. ALTER
-- TABLE … ADD KEY runs online (in place, no table lock) on MySQL and MariaDB.
-- +goose Up
ALTER TABLE following ADD KEY idx_following_author (author_id, user_id);

-- +goose Down
ALTER TABLE following DROP KEY idx_following_author;
