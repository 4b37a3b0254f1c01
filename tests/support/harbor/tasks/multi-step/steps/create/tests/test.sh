#!/bin/sh
sh /tests/check.sh 'one'
