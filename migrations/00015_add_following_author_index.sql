-- idx_following_author lets a fan-out batch check its recipients' follow
-- edges with one range read, author_id = ? AND user_id in the batch's span of
-- the follower space, instead of a point lookup per listed user: the list of
-- ids leaves the statement and the reads follow the index in order. ALTER
-- TABLE … ADD KEY runs online (in place, no table lock) on MySQL and MariaDB.
-- +goose Up
ALTER TABLE following ADD KEY idx_following_author (author_id, user_id);

-- +goose Down
ALTER TABLE following DROP KEY idx_following_author;
