-- First start of an empty PostgreSQL volume (docker-entrypoint-initdb.d), run
-- by the image's superuser. Development credentials: NOT FOR PRODUCTION.
--
-- gatehouse_owner owns the database and everything the migrations create.
-- CREATEROLE lets the migrations create the non-owning role gatehouse_app that
-- the server switches to for tenant work (row-level security binds it; the
-- owner role is used only for migrations and for audited platform work).
CREATE ROLE gatehouse_owner WITH LOGIN CREATEROLE PASSWORD 'gatehouse';
CREATE DATABASE gatehouse OWNER gatehouse_owner;
