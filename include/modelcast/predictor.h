// modelcast predictor: forecast the loss curve and choose when to publish weights.
// Umbrella header; see the individual headers for contracts.
#pragma once

#include "modelcast/predictor_csv.h"
#include "modelcast/predictor_forecast.h"
#include "modelcast/predictor_hedge.h"
#include "modelcast/predictor_online.h"
#include "modelcast/predictor_planner.h"
#include "modelcast/predictor_viper.h"
