#!/bin/sh
echo one > /app/state
